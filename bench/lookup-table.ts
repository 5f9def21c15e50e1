// The performance document's look-up section, as bench/lookup.ts measured it (`--write`): every
// stage's figures, the ratios beside their goals, and when, where and on which commit it ran.
import { readFileSync, writeFileSync } from "node:fs";
import { cpus, platform, arch } from "node:os";

export interface MeasuredStage {
  setup: string;
  stage: string;
  rps: number;
  p99Ms: number;
  serviceUs: number;
  postgresUs: number | null;
}

const DOCUMENT = new URL("../docs/performance.md", import.meta.url).pathname;
const START = "<!-- written by bench/lookup.ts --write: start -->";
const END = "<!-- written by bench/lookup.ts --write: end -->";
const SQLITE = "SQLite, 1 instance";

/** The goals the look-up figures are measured against: what each compares, and the bound. */
function goals(find: (setup: string, stage: string) => MeasuredStage | undefined): string[] {
  const billed = find(SQLITE, "billed");
  const rows: Array<[string, number | undefined, string, (value: number) => boolean, string]> = [
    ["SQLite, billed ÷ `/healthz` (req/s)", ratio(billed?.rps, find(SQLITE, "healthz")?.rps), "≥ 0.35×", (v) => v >= 0.35, "×"],
    ["SQLite, service CPU per billed look-up", billed?.serviceUs, "≤ 35 µs", (v) => v <= 35, " µs"],
    ["SQLite, billed p99", billed?.p99Ms, "≤ 5 ms", (v) => v <= 5, " ms"],
    [
      "SQLite, GTINs per second in batches of 100 ÷ billed look-ups per second",
      ratio(100 * (find(SQLITE, "batch")?.rps ?? Number.NaN), billed?.rps),
      "≥ 10×",
      (v) => v >= 10,
      "×",
    ],
    [
      "PostgreSQL, 2 instances, 1 organization ÷ SQLite (billed req/s)",
      ratio(find("PostgreSQL, 2 instances, 1 org", "billed")?.rps, billed?.rps),
      "≥ 0.5×",
      (v) => v >= 0.5,
      "×",
    ],
    [
      "PostgreSQL, 2 instances, 50 organizations ÷ SQLite (billed req/s)",
      ratio(find("PostgreSQL, 2 instances, 50 orgs", "billed")?.rps, billed?.rps),
      "≥ 1×",
      (v) => v >= 1,
      "×",
    ],
    [
      "PostgreSQL CPU per billed look-up, 2 instances, 1 organization",
      find("PostgreSQL, 2 instances, 1 org", "billed")?.postgresUs ?? undefined,
      "≤ 100 µs",
      (v) => v <= 100,
      " µs",
    ],
  ];
  return rows
    .filter(([, value]) => value !== undefined && Number.isFinite(value))
    .map(([what, value, goal, met, unit]) => `| ${what} | ${format(value!)}${unit} | ${goal} | ${met(value!) ? "yes" : "no"} |`);
}

function ratio(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || b === undefined ? undefined : a / b;
}

function format(value: number): string {
  return value >= 100 ? Math.round(value).toLocaleString("en").replaceAll(",", " ") : value.toFixed(value >= 10 ? 1 : 2);
}

/** The section's text for `stages`, measured by `command` on `commit`. */
export function lookupSection(stages: MeasuredStage[], command: string, commit: string): string {
  const find = (setup: string, stage: string) => stages.find((s) => s.setup === setup && s.stage === stage);
  const when = new Date().toISOString().slice(0, 16).replace("T", " ");
  const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? "unknown CPU"}, ${platform()} ${arch()}, Bun ${Bun.version}`;
  return [
    START,
    `**Run**: ${when} UTC, commit \`${commit}\`, ${machine}: \`${command}\`. Medians over the rounds; CPU per request`,
    "of the service processes and of PostgreSQL's backends, from /proc.",
    "",
    "| setup | stage | requests/s | p99 | service CPU per request | PostgreSQL CPU per request |",
    "|---|---|---|---|---|---|",
    ...stages.map(
      (s) =>
        `| ${s.setup} | ${s.stage} | ${format(s.rps)} | ${s.p99Ms.toFixed(1)} ms | ${s.serviceUs.toFixed(0)} µs | ${s.postgresUs === null ? "–" : `${s.postgresUs.toFixed(0)} µs`} |`,
    ),
    "",
    "| figure | measured | goal | met |",
    "|---|---|---|---|",
    ...goals(find),
    END,
  ].join("\n");
}

/** Replaces the section in docs/performance.md. */
export function writeLookupSection(section: string): void {
  const text = readFileSync(DOCUMENT, "utf8");
  const start = text.indexOf(START);
  const end = text.indexOf(END);
  if (start < 0 || end < start) throw new Error(`docs/performance.md has no section between ${START} and ${END}`);
  writeFileSync(DOCUMENT, text.slice(0, start) + section + text.slice(end + END.length));
}
