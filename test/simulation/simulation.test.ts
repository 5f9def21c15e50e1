import { describe, expect, test } from "bun:test";
import { TEST_DATABASE_URL } from "../support/context";
import { DEFAULT_STEPS, simulate } from "./simulation";

// A bounded run of the seeded money simulation on the store under test; `npm run simulate -- --seeds N`
// runs as many as you like. Every fault class is on.
const store = TEST_DATABASE_URL === null ? "sqlite" : "postgres";
const SEEDS = store === "sqlite" ? 60 : 25;

describe(`the seeded money simulation on ${store}`, () => {
  test(`${SEEDS} seeds of look-ups (single, batch, HEAD, keyed, stalling), grants, purchases, refunds, disputes, renewals, key rotations, feed imports, expiry, sweeps and faults keep every invariant`, async () => {
    const failures: string[] = [];
    let operations = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const report = await simulate({ seed, store, postgresUrl: TEST_DATABASE_URL ?? undefined });
      operations += report.operations;
      if (report.violations.length > 0)
        failures.push(`seed ${seed}: ${report.violations.join("; ")} (replay: npm run simulate -- --seed ${seed} --store ${store})`);
    }
    expect(operations).toBe(SEEDS * DEFAULT_STEPS);
    expect(failures).toEqual([]);
  }, 600_000);
});
