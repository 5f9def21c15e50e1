// Mutation testing of the money code (StrykerJS with its command runner; Bun runs the tests).
// `npm run mutate` (scripts/mutate.ts) runs it once per store: MUTATE_STORE=sqlite mutates the
// shared money code and the SQLite side, MUTATE_STORE=postgres the PostgreSQL side. Each mutant is
// killed by the pure rules' unit tests, then the seeded simulation, then the money tests, each
// stopping at its first failure. MUTATE_FILES narrows a run to some files and MUTATE_COMMAND
// replaces the test command (quick local rounds, e.g. the unit tests alone); see docs/testing.md.
const store = process.env.MUTATE_STORE ?? "sqlite";
const postgresUrl = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

const MONEY_TESTS = [
  "test/billing/ledger-invariant.test.ts",
  "test/billing/no-overdraw.test.ts",
  "test/billing/reservations.test.ts",
  "test/products/debit-failures.test.ts",
  "test/products/price.test.ts",
  "test/products/batch.test.ts",
  "test/billing/refund-during-lookups.test.ts",
  "test/billing/stripe.test.ts",
  "test/billing/checkout.test.ts",
  "test/billing/subscriptions.test.ts",
  "test/billing/balance.test.ts",
  "test/billing/usage.test.ts",
  "test/keys/key-controls.test.ts",
  "test/billing/two-instances.test.ts",
  "test/http/head.test.ts",
  "test/billing/invoices.test.ts",
  "test/billing/transactions.test.ts",
  "test/webhooks/outbox.test.ts",
  "test/keys/api-keys.test.ts",
];

// The pure rules' unit tests run first: they fail in milliseconds. A simulation seed that hangs
// fails at the watchdog (a SQLite seed takes under 1 s alone, a PostgreSQL seed under 10 s) rather
// than at Stryker's time-out, which is several times longer. Every `bun test` has the suite's
// 30 s per-test limit (some PostgreSQL tests wait out a lock for longer than Bun's default 5 s).
const UNIT_TESTS = "bun test --bail --timeout=30000 src/db/ledger src/modules/billing src/modules/products/service.test.ts src/http/idempotency.test.ts";

const POSTGRES_TESTS = [
  "test/billing/held-in-memory.postgres.test.ts",
  "test/billing/reserve-release-race.postgres.test.ts",
  "test/products/clock-skew.postgres.test.ts",
  "test/products/debit-in-doubt.postgres.test.ts",
  "test/keys/key-limit-instances.postgres.test.ts",
  "test/keys/remembered-credentials.postgres.test.ts",
  "test/billing/payment-lock.postgres.test.ts",
  "test/http/idempotency-claims.postgres.test.ts",
  "test/billing/credit-leases.postgres.test.ts",
  "test/billing/credit-lease-policy.postgres.test.ts",
  "test/billing/packed-ledger.postgres.test.ts",
];

export const targets = {
  sqlite: {
    mutate: [
      "src/db/ledger/allocation.ts",
      "src/db/ledger/operations.ts",
      "src/db/ledger/reversals.ts",
      "src/db/ledger/sqlite.ts",
      "src/db/ledger/sqlite-holds.ts",
      "src/db/ledger/sqlite-plan.ts",
      "src/db/idempotency/sqlite.ts",
      "src/http/idempotency.ts",
      "src/modules/products/look-up.ts",
      "src/modules/products/service.ts",
      "src/modules/billing/providers/stripe.ts:145-296",
    ],
    // Two commands at once keep both cores busy.
    concurrency: 2,
    command: `${UNIT_TESTS} && bun test/simulation/cli.ts --store sqlite --seeds 15 --first-failing --watchdog 30 > /dev/null && bun test --bail --timeout=30000 ${MONEY_TESTS.join(" ")}`,
  },
  postgres: {
    // The debit planner serves both stores' group commits and watch debits; its unit tests run first in either command.
    mutate: ["src/db/ledger/debit-plan.ts", "src/db/ledger/postgres.ts", "src/db/ledger/postgres-reservations.ts", "src/db/ledger/postgres-debits.ts", "src/db/ledger/postgres-leases.ts", "src/db/ledger/postgres-lease-settlement.ts", "src/db/ledger/packed-ledger.ts", "src/db/idempotency/postgres.ts"],
    // Its commands spend much of their time waiting (on locks, timers, a hung seed's watchdog): three at once.
    concurrency: 3,
    command: `${UNIT_TESTS} && TEST_DATABASE_URL=${postgresUrl} bun test/simulation/cli.ts --store postgres --seeds 6 --first-failing --watchdog 60 > /dev/null && TEST_DATABASE_URL=${postgresUrl} bun test --bail --timeout=30000 --path-ignore-patterns= ${[...POSTGRES_TESTS, ...MONEY_TESTS].join(" ")}`,
  },
};

const target = targets[store];
const narrowed = process.env.MUTATE_FILES?.split(",").filter(Boolean);
// A narrowed run keeps its results when asked to (MUTATE_KEEP=1, see scripts/mutate.ts): the kept
// results then hold the files it names, which is how a whole run is built up a few files at a time.
const keeps = process.env.MUTATE_COMMAND === undefined && (narrowed === undefined || process.env.MUTATE_KEEP === "1");

/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: "command",
  commandRunner: { command: process.env.MUTATE_COMMAND ?? target.command },
  mutate: narrowed ?? target.mutate,
  // SQL texts and messages: an emptied statement fails at its first run, a changed message moves no credit.
  mutator: { excludedMutations: ["StringLiteral"] },
  concurrency: Number(process.env.MUTATE_CONCURRENCY ?? target.concurrency),
  // Beyond the unmutated run's time, what a command running beside others may take before Stryker
  // calls its mutant a time-out.
  timeoutMS: 120_000,
  // The PostgreSQL command's first run (every test, unmutated) takes minutes on a busy machine.
  dryRunTimeoutMinutes: 20,
  ignorePatterns: ["dist", "bench/results", "test/screenshots", "reports", ".stryker-tmp", "data"],
  reporters: ["clear-text", "progress-append-only", "json"],
  jsonReporter: { fileName: `reports/mutation/${store}.json` },
  // A run over some kept mutants only (`--survivors`) is scored within the kept results: MUTATE_BREAK=0.
  thresholds: { high: 90, low: 85, break: Number(process.env.MUTATE_BREAK ?? 85) },
  // The kept results live in the repository: a run retests only the mutants of code changed since
  // (so CI's run is short), and `npm run mutate -- --force` retests every one. A narrowed or quick
  // round neither reads nor replaces them unless MUTATE_KEEP=1.
  incremental: keeps,
  incrementalFile: `test/mutation/${store}.incremental.json`,
  tempDirName: `.stryker-tmp/${store}`,
  cleanTempDir: "always",
};
