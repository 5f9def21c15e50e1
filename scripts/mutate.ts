// `npm run mutate [-- --store sqlite|postgres] [--kept-only]`: mutation testing of the money code
// with StrykerJS (stryker.config.mjs), once per store; the PostgreSQL side when a server answers.
// Runs are incremental against the results kept in test/mutation/; `--kept-only` (CI) skips a store
// that has none kept rather than starting a whole run. Prints each store's score and the combined
// one; the JSON reports land in reports/mutation/.
import { parseArgs } from "node:util";
import { postgresReachable } from "./postgres-reachable";

const { values } = parseArgs({ options: { store: { type: "string", multiple: true }, "kept-only": { type: "boolean", default: false } } });
const stores = values.store ?? ["sqlite", ...((await postgresReachable()) ? ["postgres"] : [])];

let killed = 0;
let total = 0;
for (const store of stores) {
  if (values["kept-only"] && !(await Bun.file(`test/mutation/${store}.incremental.json`).exists())) {
    console.log(`mutation ${store}: no results kept in test/mutation/, skipped (a whole run: npm run mutate -- --store ${store})`);
    continue;
  }
  const run = Bun.spawn(["npx", "stryker", "run", "stryker.config.mjs"], {
    env: { ...process.env, MUTATE_STORE: store },
    stdout: "inherit",
    stderr: "inherit",
  });
  if ((await run.exited) !== 0) process.exit(1);
  const report = (await Bun.file(`reports/mutation/${store}.json`).json()) as { files: Record<string, { mutants: Array<{ status: string }> }> };
  const mutants = Object.values(report.files).flatMap((file) => file.mutants);
  const detected = mutants.filter((mutant) => ["Killed", "Timeout"].includes(mutant.status)).length;
  const valid = mutants.filter((mutant) => ["Killed", "Timeout", "Survived", "NoCoverage"].includes(mutant.status)).length;
  console.log(`mutation ${store}: ${detected} of ${valid} mutants detected (${((100 * detected) / valid).toFixed(1)} %)`);
  killed += detected;
  total += valid;
}
if (total > 0) console.log(`mutation score: ${((100 * killed) / total).toFixed(1)} % (${killed} of ${total})`);
