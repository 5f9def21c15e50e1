// A small Prometheus registry (text exposition format 0.0.4): counters, histograms and gauges read
// at scrape time. Label values are joined into one Map key, so recording is a lookup and an add.

type LabelValues = readonly string[];

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function labelText(names: readonly string[], values: LabelValues, extra = ""): string {
  const pairs = names.map((name, index) => `${name}="${escapeLabel(values[index] ?? "")}"`);
  if (extra !== "") pairs.push(extra);
  return pairs.length === 0 ? "" : `{${pairs.join(",")}}`;
}

function formatNumber(value: number): string {
  return Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : value < 0 ? "-Inf" : "NaN";
}

interface Metric {
  render(): string;
}

export class Counter implements Metric {
  private readonly series = new Map<string, { labels: LabelValues; value: number }>();

  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly labelNames: readonly string[] = [],
  ) {}

  inc(labels: LabelValues = [], by = 1): void {
    const key = labels.join("\u0000");
    const entry = this.series.get(key);
    if (entry === undefined) this.series.set(key, { labels: [...labels], value: by });
    else entry.value += by;
  }

  value(labels: LabelValues = []): number {
    return this.series.get(labels.join("\u0000"))?.value ?? 0;
  }

  render(): string {
    let text = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} counter\n`;
    for (const { labels, value } of this.series.values()) text += `${this.name}${labelText(this.labelNames, labels)} ${formatNumber(value)}\n`;
    return text;
  }
}

export class Histogram implements Metric {
  private readonly series = new Map<string, { labels: LabelValues; counts: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly labelNames: readonly string[],
    /** Upper bounds in ascending order; +Inf is implied. */
    private readonly buckets: readonly number[],
  ) {}

  observe(labels: LabelValues, value: number): void {
    const key = labels.join("\u0000");
    let entry = this.series.get(key);
    if (entry === undefined) {
      entry = { labels: [...labels], counts: new Float64Array(this.buckets.length), sum: 0, count: 0 };
      this.series.set(key, entry);
    }
    // Counts per bucket (not cumulative) so an observation touches one slot; render sums them.
    const index = this.buckets.findIndex((bound) => value <= bound);
    if (index !== -1) entry.counts[index]!++;
    entry.sum += value;
    entry.count++;
  }

  count(labels: LabelValues): number {
    return this.series.get(labels.join("\u0000"))?.count ?? 0;
  }

  render(): string {
    let text = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} histogram\n`;
    for (const { labels, counts, sum, count } of this.series.values()) {
      let cumulative = 0;
      this.buckets.forEach((bound, index) => {
        cumulative += counts[index]!;
        text += `${this.name}_bucket${labelText(this.labelNames, labels, `le="${bound}"`)} ${cumulative}\n`;
      });
      text += `${this.name}_bucket${labelText(this.labelNames, labels, 'le="+Inf"')} ${count}\n`;
      text += `${this.name}_sum${labelText(this.labelNames, labels)} ${formatNumber(sum)}\n`;
      text += `${this.name}_count${labelText(this.labelNames, labels)} ${count}\n`;
    }
    return text;
  }
}

/** A value read when Prometheus scrapes (memory, uptime, build info). */
export class Gauge implements Metric {
  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly read: () => number,
    private readonly labels: Record<string, string> = {},
  ) {}

  render(): string {
    const names = Object.keys(this.labels);
    return `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} gauge\n${this.name}${labelText(names, Object.values(this.labels))} ${formatNumber(this.read())}\n`;
  }
}

/** A gauge with labels whose series are replaced as a whole (a snapshot taken before a scrape). */
export class LabeledGauge implements Metric {
  private series: Array<{ labels: LabelValues; value: number }> = [];

  constructor(
    readonly name: string,
    private readonly help: string,
    private readonly labelNames: readonly string[],
  ) {}

  replace(series: Array<{ labels: LabelValues; value: number }>): void {
    this.series = series;
  }

  value(labels: LabelValues): number | undefined {
    const key = labels.join("\u0000");
    return this.series.find((entry) => entry.labels.join("\u0000") === key)?.value;
  }

  render(): string {
    let text = `# HELP ${this.name} ${this.help}\n# TYPE ${this.name} gauge\n`;
    for (const { labels, value } of this.series) text += `${this.name}${labelText(this.labelNames, labels)} ${formatNumber(value)}\n`;
    return text;
  }
}

export class Registry {
  private readonly metrics: Metric[] = [];

  register<T extends Metric>(metric: T): T {
    this.metrics.push(metric);
    return metric;
  }

  render(): string {
    return this.metrics.map((metric) => metric.render()).join("");
  }
}

/** Seconds, from 0.5 ms to 10 s: the look-up is sub-millisecond, a large import or backup is not. */
export const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;
