// Ledger pagination with millions of usage rows: builds (once, then reuses) a SQLite database with
// ROWS usage transactions for one organization, spread over 60 days, plus rare grants and expiries
// and a second busy organization, then times pages of GET /customer/billing/transactions, both
// through the store and through the whole HTTP stack (app.handle).
//
//   bun bench/ledger-pages.ts            # 5,000,000 rows in /tmp/price-service-bench/ledger-5000000.db
//   ROWS=500000 bun bench/ledger-pages.ts
import { Database } from "bun:sqlite";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { SQLiteStore } from "../src/db/sqlite-store";
import { newId } from "../src/lib/ids";
import { keyedGet, time } from "./timing";

const ROWS = Number(process.env.ROWS ?? 5_000_000);
const DIR = "/tmp/price-service-bench";
const FILE = `${DIR}/ledger-${ROWS}.db`;
const ORG = "org_benchmark";
const NEIGHBOUR = "org_neighbour";
const START = Date.parse("2026-09-01T00:00:00.000Z");
const SPAN = 60 * 86_400_000;

function build(): void {
  mkdirSync(DIR, { recursive: true });
  rmSync(FILE, { force: true });
  SQLiteStore.open(`sqlite:${FILE}`).close();
  const db = new Database(FILE);
  db.exec("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -400000");
  db.query("INSERT INTO organizations (id, name, ledger_balance, created_at) VALUES (?, ?, 0, ?), (?, ?, 0, ?)").run(
    ORG,
    "Benchmark",
    START,
    NEIGHBOUR,
    "Neighbour",
    START,
  );
  const insert = db.prepare(
    "INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
  );
  const startedAt = performance.now();
  const neighbourRows = Math.floor(ROWS / 5);
  const total = ROWS + neighbourRows;
  let balance = 0;
  const batch = 100_000;
  for (let from = 0; from < total; from += batch) {
    db.transaction(() => {
      for (let i = from; i < Math.min(from + batch, total); i++) {
        // Interleave the neighbour's rows with ours, in time order, as a shared database would.
        const mine = i % 6 !== 5;
        const organization = mine ? ORG : NEIGHBOUR;
        const createdAt = START + Math.floor((i / total) * SPAN);
        let type = "usage";
        let amount = -1;
        if (mine && i % 100_000 === 0) [type, amount] = ["grant", 100_000];
        else if (mine && i % 250_000 === 7) [type, amount] = ["expiry", -500];
        balance += mine ? amount : 0;
        insert.run(
          newId("txn", createdAt),
          organization,
          type,
          amount,
          balance,
          "bkt_bench",
          type === "usage" ? "key_bench" : null,
          type === "usage" ? `req_b${i}` : null,
          type === "usage" ? "04006381333931" : null,
          type === "usage" ? "Price look-up 04006381333931" : "bench",
          createdAt,
        );
      }
    })();
    process.stdout.write(`\r  inserted ${Math.min(from + batch, total).toLocaleString("en-US")} / ${total.toLocaleString("en-US")}`);
  }
  db.exec("ANALYZE");
  db.close();
  console.log(`\n  built in ${((performance.now() - startedAt) / 1000).toFixed(0)} s`);
}

if (!existsSync(FILE) || process.env.REBUILD === "1") {
  console.log(`Building ${FILE} with ${ROWS.toLocaleString("en-US")} usage rows (plus 20% for a neighbour organization)…`);
  build();
}
const store = SQLiteStore.open(`sqlite:${FILE}`);
const count = store.connection.query("SELECT count(*) AS n FROM credit_transactions WHERE organization_id = ?").get(ORG) as { n: number };
console.log(`${FILE}: ${count.n.toLocaleString("en-US")} transactions for ${ORG}\n`);

const iso = (ms: number) => new Date(ms).toISOString();
const middle = START + SPAN / 2;
const deep = await store.listTransactions(ORG, { limit: 1, to: middle });
const deepCursor = deep.nextCursor!;

await time("first page, no filter (limit 20)", 200, () => store.listTransactions(ORG, { limit: 20 }));
await time("first page, limit 100", 200, () => store.listTransactions(ORG, { limit: 100 }));
await time("a page half-way down (cursor)", 200, () => store.listTransactions(ORG, { limit: 20, after: deepCursor }));
await time("type=usage", 200, () => store.listTransactions(ORG, { limit: 20, types: ["usage"] }));
await time(`type=grant (${Math.ceil(ROWS / 120_000)} rows among all)`, 200, () => store.listTransactions(ORG, { limit: 20, types: ["grant"] }));
await time("type=refund (no row at all)", 200, () => store.listTransactions(ORG, { limit: 20, types: ["refund"] }));
await time("from/to: one day in the middle", 200, () => store.listTransactions(ORG, { limit: 20, from: middle, to: middle + 86_400_000 }));
await time("type=grant with from/to over 30 days", 200, () => store.listTransactions(ORG, { limit: 20, types: ["grant"], from: START, to: middle }));
await time("walk 50 consecutive pages from the newest (all 50)", 5, async () => {
  let after: string | undefined;
  for (let i = 0; i < 50; i++) after = (await store.listTransactions(ORG, { limit: 20, after })).nextCursor ?? undefined;
});

// The whole stack: guard (API key), validation, store, serialization.
const get = await keyedGet(store, FILE, ORG, "/api/v1/customer/billing/transactions");
console.log("");
await time("HTTP GET /transactions (first page)", 200, () => get(""));
await time("HTTP GET /transactions?cursor=… (half-way down)", 200, () => get(`?cursor=${deepCursor}`));
await time("HTTP GET /transactions?type=grant", 200, () => get("?type=grant"));
await time("HTTP GET /transactions?from=…&to=… (one day)", 200, () => get(`?from=${iso(middle)}&to=${iso(middle + 86_400_000)}`));

store.connection.query("DELETE FROM api_keys WHERE name = 'bench'").run();
await store.close();
