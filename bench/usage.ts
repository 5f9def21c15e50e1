// The usage endpoint with millions of usage rows: builds (once, then reuses) a SQLite database with
// ROWS usage ledger rows for one organization over the last 30 days, spread over KEYS keys, and the
// hourly usage counters those debits wrote (billed requests and credits, as the debit's transaction
// counts them, plus written-behind unbilled outcomes); checks that the counters' credits equal the
// ledger; then times GET /customer/billing/usage through the store and the whole HTTP stack.
//
//   bun bench/usage.ts                 # 5,000,000 rows in /tmp/price-service-bench/usage-5000000.db
//   ROWS=500000 bun bench/usage.ts
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { SQLiteStore } from "../src/db/sqlite-store";
import { HOUR_MS, periodStartOf, USAGE_PERIODS_MS } from "../src/db/store";
import { newId } from "../src/lib/ids";
import { keyedGet, time } from "./timing";

const ROWS = Number(process.env.ROWS ?? 5_000_000);
const KEYS = Number(process.env.KEYS ?? 8);
const DIR = "/tmp/price-service-bench";
const FILE = `${DIR}/usage-${ROWS}.db`;
const ORG = "org_benchmark";
const DAY = 24 * HOUR_MS;
const END = Math.floor(Date.now() / DAY) * DAY + DAY;
const START = END - 30 * DAY;
const UNBILLED = ["no-data", "stale-data", "product-not-found", "invalid-gtin", "insufficient-credits"];

function build(): void {
  mkdirSync(DIR, { recursive: true });
  rmSync(FILE, { force: true });
  SQLiteStore.open(`sqlite:${FILE}`).close();
  const db = new Database(FILE);
  db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -400000");
  db.query("INSERT INTO organizations (id, name, ledger_balance, created_at) VALUES (?, ?, 0, ?)").run(ORG, "Benchmark", START);
  const insert = db.prepare(
    "INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at) VALUES (?, ?, 'usage', -1, ?, 'bkt_bench', ?, ?, '04006381333931', 'Price look-up 04006381333931', ?)",
  );
  const startedAt = performance.now();
  const batch = 100_000;
  for (let from = 0; from < ROWS; from += batch) {
    db.transaction(() => {
      for (let i = from; i < Math.min(from + batch, ROWS); i++) {
        const createdAt = START + Math.floor((i / ROWS) * 30 * DAY);
        insert.run(newId("txn", createdAt), ORG, -i - 1, `key_bench${i % KEYS}`, `req_b${i}`, createdAt);
      }
    })();
    process.stdout.write(`\r  inserted ${Math.min(from + batch, ROWS).toLocaleString("en-US")} / ${ROWS.toLocaleString("en-US")}`);
  }
  // What the debits' transactions counted, and what the written-behind recorder added for unbilled outcomes.
  for (const periodMs of USAGE_PERIODS_MS) {
    db.exec(`INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
             SELECT organization_id, ${periodMs}, created_at - created_at % ${periodMs}, key_id, 'fresh-offer', count(*), -sum(amount)
             FROM credit_transactions WHERE type = 'usage' GROUP BY 1, 2, 3, 4`);
  }
  const unbilled = db.prepare(
    `INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits) VALUES (?, ?, ?, ?, ?, ?, 0)
     ON CONFLICT DO UPDATE SET requests = requests + excluded.requests`,
  );
  db.transaction(() => {
    for (let hour = START; hour < END; hour += HOUR_MS) {
      for (let key = 0; key < KEYS; key++) {
        for (const [n, reason] of UNBILLED.entries()) {
          for (const periodMs of USAGE_PERIODS_MS)
            unbilled.run(ORG, periodMs, periodStartOf(hour, periodMs), `key_bench${key}`, reason, 1 + ((hour / HOUR_MS + key + n) % 17));
        }
      }
    }
  })();
  db.exec("ANALYZE");
  db.close();
  console.log(`\n  built in ${((performance.now() - startedAt) / 1000).toFixed(0)} s`);
}

if (!existsSync(FILE) || process.env.REBUILD === "1") {
  console.log(`Building ${FILE} with ${ROWS.toLocaleString("en-US")} usage rows over 30 days, ${KEYS} keys…`);
  build();
}
const store = SQLiteStore.open(`sqlite:${FILE}`);
const counts = store.connection
  .query(
    "SELECT (SELECT count(*) FROM credit_transactions WHERE organization_id = ?1 AND type = 'usage') AS ledgerRows, (SELECT -sum(amount) FROM credit_transactions WHERE organization_id = ?1 AND type = 'usage') AS ledgerCredits, (SELECT count(*) FROM usage_counters WHERE organization_id = ?1) AS counterRows, (SELECT sum(credits) FROM usage_counters WHERE organization_id = ?1 AND period_ms = 86400000) AS counterCredits",
  )
  .get(ORG) as { ledgerRows: number; ledgerCredits: number; counterRows: number; counterCredits: number };
console.log(`${FILE}: ${counts.ledgerRows.toLocaleString("en-US")} usage rows, ${counts.counterRows.toLocaleString("en-US")} counter rows for ${ORG}`);
if (counts.ledgerCredits !== counts.counterCredits) throw new Error(`counters say ${counts.counterCredits} credits, the ledger ${counts.ledgerCredits}`);
console.log(`credits: ledger ${counts.ledgerCredits.toLocaleString("en-US")} = counters ${counts.counterCredits.toLocaleString("en-US")}\n`);

await time("store: 30 days daily, by reason", 300, () => store.usageTotals(ORG, { from: START, to: END, periodMs: DAY, byKey: false }));
await time("store: 30 days daily, by key", 300, () => store.usageTotals(ORG, { from: START, to: END, periodMs: DAY, byKey: true }));
await time("store: 24 hours hourly, by reason", 300, () => store.usageTotals(ORG, { from: END - DAY, to: END, periodMs: HOUR_MS, byKey: false }));

const get = await keyedGet(store, FILE, ORG, "/api/v1/customer/billing/usage");
const iso = (ms: number) => new Date(ms).toISOString();
console.log("");
await time("HTTP GET /usage (30 days daily, by reason)", 300, () => get(`?from=${iso(START)}&to=${iso(END)}&granularity=day`));
await time("HTTP GET /usage?groupBy=key (30 days daily)", 300, () => get(`?from=${iso(START)}&to=${iso(END)}&granularity=day&groupBy=key`));
await time("HTTP GET /usage?granularity=hour (24 hours)", 300, () => get("?granularity=hour"));
await time("HTTP GET /usage?granularity=hour (30 days, 720 periods)", 100, () => get(`?from=${iso(START)}&to=${iso(END)}&granularity=hour`));

store.connection.query("DELETE FROM api_keys WHERE name = 'bench'").run();
await store.close();
