import type { FeedRun, FeedSource } from "../../db/feeds/records";
import type { Store } from "../../db/store";
import type { ServiceMetrics } from "../../lib/service-metrics";

export interface SourceStatus {
  source: FeedSource;
  offers: number;
  freshOffers: number;
  freshRatio: number;
  /** No successful run within the freshness window (counted from creation for a source that never succeeded). */
  silent: boolean;
}

/** Every source with its freshness now: offers it last wrote, how many are within the window, whether it went quiet. */
export async function sourceStatuses(store: Store, now: number, freshnessWindowMs: number): Promise<SourceStatus[]> {
  const [sources, counts] = await Promise.all([store.listFeedSources(), store.feedFreshness(now - freshnessWindowMs)]);
  const bySource = new Map(counts.map((count) => [count.sourceId, count]));
  return sources.map((source) => {
    const count = bySource.get(source.id);
    const offers = Number(count?.offers ?? 0);
    const freshOffers = Number(count?.freshOffers ?? 0);
    return {
      source,
      offers,
      freshOffers,
      freshRatio: offers === 0 ? 0 : freshOffers / offers,
      silent: now - (source.lastSuccessAt ?? source.createdAt) > freshnessWindowMs,
    };
  });
}

/**
 * A source's location as the HTTP answers show it: a URL's scheme and host (with its port), never its
 * user, password, path, query or fragment, any of which a feed host may use for a token; a directory
 * as it is. Only the operator's CLI shows the whole URL (operatorSourceJSON).
 */
export function publicLocation(location: string | null): string | null {
  if (location === null || !/^https?:\/\//i.test(location)) return location;
  const url = URL.parse(location);
  return url === null ? null : `${url.protocol}//${url.host}`;
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

export function sourceJSON(status: SourceStatus) {
  const { source } = status;
  return {
    id: source.id,
    name: source.name,
    kind: source.kind,
    location: publicLocation(source.location),
    format: source.format,
    intervalSeconds: source.intervalMs === null ? null : Math.round(source.intervalMs / 1000),
    timeoutMs: source.timeoutMs,
    retries: source.retries,
    merchants: source.merchants,
    authoritative: source.authoritative,
    createdAt: new Date(source.createdAt).toISOString(),
    nextRunAt: iso(source.nextRunAt),
    lastRunAt: iso(source.lastRunAt),
    lastSuccessAt: iso(source.lastSuccessAt),
    silent: status.silent,
    freshness: { offers: status.offers, freshOffers: status.freshOffers, freshRatio: status.freshRatio },
  };
}

/** sourceJSON with the whole location, for the operator's CLI only. */
export function operatorSourceJSON(status: SourceStatus) {
  return { ...sourceJSON(status), location: status.source.location };
}

export function runJSON(run: FeedRun) {
  return {
    id: run.id,
    sourceId: run.sourceId,
    trigger: run.trigger,
    status: run.status,
    startedAt: new Date(run.startedAt).toISOString(),
    finishedAt: new Date(run.startedAt + run.durationMs).toISOString(),
    durationMs: run.durationMs,
    file: run.file,
    httpStatus: run.httpStatus,
    attempts: run.attempts,
    recordsRead: run.recordsRead,
    products: run.products,
    offers: run.offers,
    rejectedCount: run.rejectedCount,
    rejected: run.rejected,
    error: run.error,
  };
}

/** Counts a finished run into /metrics. */
export function countRun(metrics: ServiceMetrics, sourceName: string, run: FeedRun): void {
  metrics.feedRuns.inc([sourceName, run.status]);
  metrics.feedRecords.inc([sourceName, "accepted"], run.recordsRead - run.rejectedCount);
  metrics.feedRecords.inc([sourceName, "rejected"], run.rejectedCount);
}

/** Refreshes the per-source freshness gauges of /metrics from the store (at scrape time). */
export async function refreshFreshnessMetrics(metrics: ServiceMetrics, store: Store, now: number, freshnessWindowMs: number): Promise<void> {
  const statuses = await sourceStatuses(store, now, freshnessWindowMs);
  metrics.feedLastSuccess.replace(
    statuses.map((s) => ({ labels: [s.source.name], value: s.source.lastSuccessAt === null ? 0 : s.source.lastSuccessAt / 1000 })),
  );
  metrics.feedOffers.replace(statuses.map((s) => ({ labels: [s.source.name], value: s.offers })));
  metrics.feedFreshOffers.replace(statuses.map((s) => ({ labels: [s.source.name], value: s.freshOffers })));
  metrics.feedFreshRatio.replace(statuses.map((s) => ({ labels: [s.source.name], value: s.freshRatio })));
}
