// The performance document's look-up section, as bench/lookup.ts measured it (`--write`): every
// stage's figures, the ratios beside their goals, and where and on which commit it ran.
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
  const rows: GoalRow[] = [
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
    ...scaleOutGoals(find),
  ];
  return rows
    .filter(([, value]) => value !== undefined && Number.isFinite(value))
    .map(([what, value, goal, met, unit]) => `| ${what} | ${format(value!)}${unit} | ${goal} | ${met(value!) ? "yes" : "no"} |`);
}

/** The goals' rows of `stages` (figure, measured, goal, met), as the document's table has them. */
export function goalLines(stages: MeasuredStage[]): string[] {
  return goals((setup, stage) => stages.find((s) => s.setup === setup && s.stage === stage));
}

type GoalRow = [string, number | undefined, string, (value: number) => boolean, string];

const PG1 = "PostgreSQL, 1 instance";
const PG2 = "PostgreSQL, 2 instances, 1 org";
const PG2_50 = "PostgreSQL, 2 instances, 50 orgs";

/** Service and PostgreSQL CPU of one billed look-up. */
function totalUs(stage: MeasuredStage | undefined): number | undefined {
  return stage === undefined ? undefined : stage.serviceUs + (stage.postgresUs ?? 0);
}

/** The scaled-out store's goals: CPU per billed look-up with two instances against SQLite and one instance. */
function scaleOutGoals(find: (setup: string, stage: string) => MeasuredStage | undefined): GoalRow[] {
  const sqlite = totalUs(find(SQLITE, "billed"));
  const rows: GoalRow[] = [];
  for (const [setup, organizations] of [
    [PG2, "1 organization"],
    [PG2_50, "50 organizations"],
  ] as const) {
    const billed = find(setup, "billed");
    rows.push(
      [
        `PostgreSQL, 2 instances, ${organizations}: total CPU per billed look-up ÷ SQLite's`,
        ratio(totalUs(billed), sqlite),
        "≤ 2× (floor 2.5×)",
        (v) => v <= 2,
        "×",
      ],
      [
        `PostgreSQL, 2 instances, ${organizations}: PostgreSQL CPU per billed look-up`,
        billed?.postgresUs ?? undefined,
        "≤ 40 µs (floor 60 µs)",
        (v) => v <= 40,
        " µs",
      ],
      [`PostgreSQL, 2 instances, ${organizations}: billed p99`, billed?.p99Ms, "≤ 20 ms", (v) => v <= 20, " ms"],
    );
  }
  const added = ratio(totalUs(find(PG2, "billed")), totalUs(find(PG1, "billed")));
  rows.push([
    "PostgreSQL, what the second instance adds per billed look-up (1 organization)",
    added === undefined ? undefined : 100 * (added - 1),
    "≤ 10 % (floor 15 %)",
    (v) => v <= 10,
    " %",
  ]);
  return rows;
}

function ratio(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || b === undefined ? undefined : a / b;
}

function format(value: number): string {
  return value >= 100 ? Math.round(value).toLocaleString("en").replaceAll(",", " ") : value.toFixed(value >= 10 ? 1 : 2);
}

/** The section's text for `stages`, measured by `command` on `commit`. */
export function lookupSection(stages: MeasuredStage[], command: string, commit: string): string {
  const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? "unknown CPU"}, ${platform()} ${arch()}, Bun ${Bun.version}`;
  return [
    START,
    `**Run**: commit \`${commit}\`, ${machine}: \`${command}\`. Medians over the rounds; CPU per request`,
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
    ...goalLines(stages),
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
