// Long form of test/resilience/crash.test.ts: bun test/resilience/crash-soak.ts [rounds=50] (npm run crash-soak)
import { runCrashRounds } from "./crash-harness";

const rounds = Number(process.argv[2] ?? 50);
const started = Date.now();
const report = await runCrashRounds({ rounds, clients: 16, minRunMs: 100, maxRunMs: 2000 });
console.log(
  `${report.rounds} SIGKILL rounds in ${Math.round((Date.now() - started) / 1000)} s, ${report.billedAnswers} billed 200 answers checked, ${report.idempotentLookups} keyed look-ups retried to an answer, ${report.problems.length} problems`,
);
for (const problem of report.problems) console.log(`  ${problem}`);
process.exit(report.problems.length === 0 ? 0 : 1);
