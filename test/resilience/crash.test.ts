import { expect, test } from "bun:test";
import { runCrashRounds } from "./crash-harness";

test("after SIGKILL at random moments under load, the ledger balances and every billed 200 has exactly one usage row", async () => {
  const report = await runCrashRounds({ rounds: 4, clients: 8, minRunMs: 150, maxRunMs: 600 });
  expect(report.problems).toEqual([]);
  expect(report.billedAnswers).toBeGreaterThan(0);
}, 120_000);
