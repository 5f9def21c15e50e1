// `npm run simulate -- [--seeds N | --seed S] [--store sqlite|postgres] [--steps N] [--from S] [--trace] [--first-failing] [--progress] [--watchdog S]`:
// runs the seeded money simulation (simulation.ts) and prints, per store, the seeds,
// operations, faults injected and violations. A failing seed prints its trace; `--seed S` replays it.
// `--progress` names each seed on stderr as it starts. `--first-failing` stops each store at its first failing seed (to see which seed first catches a defect).
// `--watchdog S` fails the run when a seed has not ended after S seconds (default 300): a hang is a failure.
import { parseArgs } from "node:util";
import { DEFAULT_POSTGRES_URL, DEFAULT_STEPS, simulate, type StoreKind } from "./simulation";

const { values } = parseArgs({
  options: {
    seeds: { type: "string", default: "100" },
    seed: { type: "string" },
    from: { type: "string", default: "1" },
    store: { type: "string", multiple: true },
    steps: { type: "string", default: String(DEFAULT_STEPS) },
    trace: { type: "boolean", default: false },
    "first-failing": { type: "boolean", default: false },
    progress: { type: "boolean", default: false },
    watchdog: { type: "string", default: "300" },
  },
});
const stores = (values.store ?? (process.env.TEST_DATABASE_URL ? ["sqlite", "postgres"] : ["sqlite"])) as StoreKind[];
const postgresUrl = process.env.TEST_DATABASE_URL?.trim() || DEFAULT_POSTGRES_URL;
const seeds = values.seed !== undefined ? [Number(values.seed)] : Array.from({ length: Number(values.seeds) }, (_, index) => Number(values.from) + index);
const steps = Number(values.steps);
/** A seed that has not ended by then prints its trace so far and fails the run. */
const WATCHDOG_MS = Number(values.watchdog) * 1000;

let failed = 0;
for (const store of stores) {
  failed = 0;
  const started = performance.now();
  let operations = 0;
  let faults = 0;
  let violations = 0;
  let debitsInDoubt = 0;
  const operationCounts: Record<string, number> = {};
  const faultCounts: Record<string, number> = {};
  const leaseCounts: Record<string, number> = {};
  for (const seed of seeds) {
    if (values.progress) process.stderr.write(`${store} seed ${seed}\n`);
    const trace: string[] = [];
    const watchdog = setTimeout(() => {
      console.log(`\n${store} seed ${seed} has not ended after ${WATCHDOG_MS / 1000} s; its trace so far:\n${trace.join("\n")}`);
      process.exit(1);
    }, WATCHDOG_MS);
    const report = await simulate({ seed, store, steps, postgresUrl, trace });
    clearTimeout(watchdog);
    operations += report.operations;
    faults += report.faultsInjected;
    addCounts(operationCounts, report.operationCounts);
    addCounts(faultCounts, report.faultCounts);
    addCounts(leaseCounts, report.leaseCounts);
    violations += report.violations.length;
    debitsInDoubt += report.trace.filter((line) => line.endsWith("(debit in doubt)")).length;
    if (report.violations.length > 0 || values.trace) {
      console.log(
        `\n${store} seed ${seed}: ${report.violations.length} violation(s)\n  ${report.violations.join("\n  ")}\n  replay: npm run simulate -- --seed ${seed} --store ${store} --trace`,
      );
      console.log(report.trace.join("\n"));
    }
    if (report.violations.length > 0) failed++;
    if (report.violations.length > 0 && values["first-failing"]) {
      console.log(`${store}: first failing seed ${seed}`);
      break;
    }
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`${store} operations: ${formatCounts(operationCounts)}`);
  console.log(`${store} faults: ${formatCounts(faultCounts)}`);
  if (store === "postgres") console.log(`${store} credit leases: ${formatCounts(leaseCounts)}`);
  console.log(
    `${store}: ${seeds.length} seeds, ${operations} operations, ${faults} faults injected, ${debitsInDoubt} look-ups answered with their debit in doubt, ${violations} violations, ${failed} failing seeds, ${seconds} s`,
  );
}
process.exit(failed > 0 ? 1 : 0);

function addCounts(into: Record<string, number>, counts: Record<string, number>): void {
  for (const [name, count] of Object.entries(counts)) into[name] = (into[name] ?? 0) + count;
}

function formatCounts(counts: Record<string, number>): string {
  return Object.entries(counts)
    .sort(([, a], [, b]) => b - a)
    .map(([name, count]) => `${name} ${count}`)
    .join(", ");
}
