// `npm run mutate [-- --store sqlite|postgres] [--kept-only | --add FILE…] [--force]`: mutation
// testing of the money code with StrykerJS (stryker.config.mjs), once per store; the PostgreSQL side
// when a server answers. Runs are incremental against the results kept in test/mutation/:
// - no option: every file of the store's target (a whole run);
// - `--kept-only` (CI): only the files the kept results hold, and nothing for a store with none;
// - `--add FILE`: the kept files and FILE, so a whole run too long for one sitting is built up a
//   file at a time;
// - `--again FILE`: as `--add`, with FILE's kept results dropped first, so its mutants are tested
//   again (the kept results know when code changed, not when a test that kills a mutant was added);
// - `--survivors FILE`: only FILE's kept surviving mutants again (after a test that may kill them
//   was added), their new results written into the kept results; with `--status Timeout`, its
//   timed-out ones instead (a time-out may be a slow machine's, not a mutant that hangs); with
//   `--lines FROM-TO` (repeatable), only those starting on these lines;
// - `--force`: every mutant of those files again, kept results or not.
// Prints each store's score, the target files its kept results do not hold yet, and the combined
// score; the JSON reports land in reports/mutation/.
import { parseArgs } from "node:util";
import { targets } from "../stryker.config.mjs";
import { postgresReachable } from "./postgres-reachable";

type Store = "sqlite" | "postgres";

const { values } = parseArgs({
  options: {
    store: { type: "string", multiple: true },
    "kept-only": { type: "boolean", default: false },
    add: { type: "string", multiple: true },
    again: { type: "string", multiple: true },
    survivors: { type: "string", multiple: true },
    status: { type: "string", default: "Survived" },
    lines: { type: "string", multiple: true },
    force: { type: "boolean", default: false },
  },
});
const stores = (values.store ?? ["sqlite", ...((await postgresReachable()) ? ["postgres"] : [])]) as Store[];

/** A target entry's file, without the line range Stryker may be given (`file:10-20`). */
const fileOf = (entry: string) => entry.replace(/:\d+-\d+$/, "");

/** The file of the store's kept results. */
const keptResults = (store: Store) => Bun.file(`test/mutation/${store}.incremental.json`);

/** The files the store's kept results hold (empty when none are kept). */
async function keptFiles(store: Store): Promise<Set<string>> {
  const kept = keptResults(store);
  if (!(await kept.exists())) return new Set();
  return new Set(Object.keys(((await kept.json()) as { files: Record<string, unknown> }).files));
}

/** Drops the kept results of `files`, so the next run tests their mutants again. */
async function dropKept(store: Store, files: string[]): Promise<void> {
  const kept = keptResults(store);
  if (files.length === 0 || !(await kept.exists())) return;
  const report = (await kept.json()) as { files: Record<string, unknown> };
  for (const file of files) delete report.files[file];
  await Bun.write(kept, `${JSON.stringify(report, null, 1)}\n`);
}

/** The target entries a run of `store` mutates, or null for all of them (a whole run). */
async function entriesToRun(store: Store): Promise<string[] | null> {
  const again = values.again ?? [];
  const added = new Set([...(values.add ?? []), ...again]);
  if (!values["kept-only"] && added.size === 0) return null;
  const unknown = [...added].filter((file) => !targets[store].mutate.some((entry) => fileOf(entry) === file));
  if (unknown.length > 0) throw new Error(`not in the ${store} target (stryker.config.mjs): ${unknown.join(", ")}`);
  await dropKept(store, again);
  const kept = await keptFiles(store);
  return targets[store].mutate.filter((entry) => kept.has(fileOf(entry)) || added.has(fileOf(entry)));
}

/**
 * Cuts each kept mutant's statusReason (the failing command's whole output, most of the file's
 * size) to its first line, and orders the mutants by id (Stryker writes reused ones in any order),
 * so the file changes only when results do: the results Stryker reuses are the statuses.
 */
async function trimKept(store: Store): Promise<void> {
  const kept = keptResults(store);
  if (!(await kept.exists())) return;
  const report = (await kept.json()) as { files: Record<string, { mutants: Array<{ id: string; statusReason?: string }> }> };
  for (const file of Object.values(report.files)) {
    file.mutants.sort((a, b) => Number(a.id) - Number(b.id));
    for (const mutant of file.mutants) if (mutant.statusReason !== undefined) mutant.statusReason = mutant.statusReason.split("\n", 1)[0]!.slice(0, 160);
  }
  await Bun.write(kept, `${JSON.stringify(report, null, 1)}\n`);
}

interface Mutant {
  id: string;
  mutatorName: string;
  replacement?: string;
  status: string;
  statusReason?: string;
  killedBy?: string[];
  testsCompleted?: number;
  location: { start: { line: number; column: number }; end: { line: number; column: number } };
}
type Report = { files: Record<string, { source: string; mutants: Mutant[] }> };

/** The `--lines FROM-TO` ranges, as [from, to]. */
const lineRanges = (values.lines ?? []).map((range) => {
  const bounds = /^(\d+)-(\d+)$/.exec(range);
  if (bounds === null) throw new Error(`--lines ${range}: expected FROM-TO, as 50-60`);
  return [Number(bounds[1]), Number(bounds[2])] as const;
});
if (lineRanges.length > 0 && !values.survivors) throw new Error("--lines narrows --survivors FILE");
/** Whether a line is within a `--lines` range (every line when none is given). */
const onAskedLines = (line: number) => lineRanges.length === 0 || lineRanges.some(([from, to]) => from <= line && line <= to);

/** Stryker's mutate entries (`file:line:column-line:column`) of the kept mutants of `files` with status `--status`. */
async function entriesWithStatus(store: Store, files: string[]): Promise<string[]> {
  const kept = keptResults(store);
  if (!(await kept.exists())) return [];
  const report = (await kept.json()) as Report;
  return Object.entries(report.files).flatMap(([file, { mutants }]) =>
    !files.includes(file)
      ? []
      : mutants
          .filter((mutant) => mutant.status === values.status && onAskedLines(mutant.location.start.line))
          .map(({ location: { start, end } }) => `${file}:${start.line}:${start.column - 1}-${end.line}:${end.column}`),
  );
}

const mutantKey = (mutant: Mutant) =>
  `${mutant.mutatorName} ${mutant.replacement} ${mutant.location.start.line}:${mutant.location.start.column}-${mutant.location.end.line}:${mutant.location.end.column}`;

/** Writes the results of a run over some kept mutants (`--survivors`) into the kept results. */
async function mergeIntoKept(store: Store): Promise<void> {
  const kept = keptResults(store);
  const report = (await kept.json()) as Report;
  const rerun = (await Bun.file(`reports/mutation/${store}.json`).json()) as Report;
  for (const [file, { source, mutants }] of Object.entries(rerun.files)) {
    const target = report.files[file];
    if (target?.source !== source) throw new Error(`${file} changed since its kept results: run npm run mutate -- --store ${store} --add ${file}`);
    const byKey = new Map(target.mutants.map((mutant) => [mutantKey(mutant), mutant]));
    for (const mutant of mutants) {
      // Only the mutants asked for: others nested in their ranges keep their results.
      const keptMutant = byKey.get(mutantKey(mutant));
      if (keptMutant?.status !== values.status || !onAskedLines(keptMutant.location.start.line)) continue;
      const { status, statusReason, killedBy = [], testsCompleted } = mutant;
      Object.assign(keptMutant, { status, statusReason, killedBy, testsCompleted });
    }
  }
  await Bun.write(kept, `${JSON.stringify(report, null, 1)}\n`);
}

// A quick round's command is not the store's: its results never replace kept ones.
if (values.survivors && process.env.MUTATE_COMMAND !== undefined) throw new Error("--survivors runs the store's own command: unset MUTATE_COMMAND");

let killed = 0;
let total = 0;
for (const store of stores) {
  const entries = values.survivors ? await entriesWithStatus(store, values.survivors) : await entriesToRun(store);
  if (entries !== null && entries.length === 0) {
    const none = values.survivors ? `no ${values.status} mutants of ${values.survivors.join(", ")}` : "no results";
    const hint = values.survivors ? "" : ` (a whole run: npm run mutate -- --store ${store})`;
    console.log(`mutation ${store}: ${none} kept in test/mutation/, skipped${hint}`);
    continue;
  }
  // The survivors' run is scored within the kept results, not alone.
  const narrowed =
    entries === null ? {} : values.survivors ? { MUTATE_FILES: entries.join(","), MUTATE_BREAK: "0" } : { MUTATE_FILES: entries.join(","), MUTATE_KEEP: "1" };
  const run = Bun.spawn(["npx", "stryker", "run", "stryker.config.mjs", ...(values.force ? ["--force"] : [])], {
    env: { ...process.env, ...narrowed, MUTATE_STORE: store },
    stdout: "inherit",
    stderr: "inherit",
  });
  if ((await run.exited) !== 0) process.exit(1);
  if (values.survivors) await mergeIntoKept(store);
  await trimKept(store);
  const report = (await (values.survivors ? keptResults(store) : Bun.file(`reports/mutation/${store}.json`)).json()) as Report;
  const mutants = Object.values(report.files).flatMap((file) => file.mutants);
  const detected = mutants.filter((mutant) => ["Killed", "Timeout"].includes(mutant.status)).length;
  const valid = mutants.filter((mutant) => ["Killed", "Timeout", "Survived", "NoCoverage"].includes(mutant.status)).length;
  console.log(`mutation ${store}: ${detected} of ${valid} mutants detected (${((100 * detected) / valid).toFixed(1)} %)`);
  const missing = targets[store].mutate.map(fileOf).filter((file) => !(file in report.files));
  if (missing.length > 0) console.log(`mutation ${store}: not in the kept results yet: ${missing.join(", ")} (npm run mutate -- --store ${store} --add FILE)`);
  killed += detected;
  total += valid;
}
if (total > 0) console.log(`mutation score: ${((100 * killed) / total).toFixed(1)} % (${killed} of ${total})`);
