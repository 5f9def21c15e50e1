// Import throughput against `sqlite3 .import` of the same records into a plain table, in the same
// run: `bun bench/import.ts [--records N]`. Writes the feed as NDJSON and as CSV, imports each
// into a fresh database file through the service's importer (validation, upserts of products,
// merchants and offers, price history), and times sqlite3's CLI importing the CSV into a table with
// the same columns and no keys. Prints records/s and the ratio to sqlite3 for each format.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SQLiteStore } from "../src/db/sqlite-store";
import { importFeed } from "../src/modules/ingest/import-feed";
import { gtin13 } from "../src/modules/ingest/demo-data";

const { values } = parseArgs({ options: { records: { type: "string", default: "200000" } } });
const count = Number(values.records);
const directory = mkdtempSync(join(tmpdir(), "bench-import-"));
const COLUMNS = ["gtin", "title", "brand", "merchantId", "merchantName", "price", "currency", "shipping", "availability", "condition", "url", "observedAt"];

function records(): Array<Record<string, string>> {
  const observedAt = new Date(Date.now() - 3_600_000).toISOString();
  return Array.from({ length: count }, (_, index) => {
    const gtin = gtin13(`400${String(Math.floor(index / 4)).padStart(9, "0")}`);
    const merchant = `shop-${index % 4}`;
    return { gtin, title: `Product ${index >> 2}`, brand: "Acme", merchantId: merchant, merchantName: `Shop ${index % 4}`, price: (1 + (index % 5000) / 100).toFixed(2), currency: "EUR", shipping: "4.90", availability: "in_stock", condition: "new", url: `https://shop.example/p/${index}`, observedAt };
  });
}

const rows = records();
const ndjsonPath = join(directory, "feed.ndjson");
const csvPath = join(directory, "feed.csv");
writeFileSync(ndjsonPath, rows.map((row) => JSON.stringify(row)).join("\n"));
writeFileSync(csvPath, [COLUMNS.join(","), ...rows.map((row) => COLUMNS.map((column) => row[column]).join(","))].join("\n"));

function timeSQLite3(): number {
  const database = join(directory, `plain-${crypto.randomUUID()}.db`);
  const create = `CREATE TABLE plain (${COLUMNS.map((column) => `"${column}" TEXT`).join(", ")});`;
  const started = performance.now();
  const result = Bun.spawnSync(["sqlite3", database, create, ".mode csv", `.import --skip 1 ${csvPath} plain`]);
  const elapsed = performance.now() - started;
  if (result.exitCode !== 0) throw new Error(`sqlite3 failed: ${result.stderr.toString()}`);
  return elapsed;
}

async function timeImport(format: "ndjson" | "csv"): Promise<number> {
  const store = SQLiteStore.open(`sqlite:${join(directory, `service-${format}-${crypto.randomUUID()}.db`)}`);
  const started = performance.now();
  const report = await importFeed(store, Bun.file(format === "csv" ? csvPath : ndjsonPath).stream(), { format, now: Date.now() });
  const elapsed = performance.now() - started;
  await store.close();
  if (report.rejectedCount !== 0 || report.offers !== count) throw new Error(`import ${format}: ${JSON.stringify({ ...report, rejected: report.rejected.slice(0, 3) })}`);
  return elapsed;
}

try {
  // Alternate the runs and keep each one's best of three: the machine is shared.
  const best = { sqlite3: Infinity, ndjson: Infinity, csv: Infinity };
  for (let round = 0; round < 3; round++) {
    best.sqlite3 = Math.min(best.sqlite3, timeSQLite3());
    best.ndjson = Math.min(best.ndjson, await timeImport("ndjson"));
    best.csv = Math.min(best.csv, await timeImport("csv"));
  }
  const rate = (ms: number) => Math.round(count / (ms / 1000));
  console.log(`${count} records`);
  console.log(`sqlite3 .import (CSV, plain table): ${rate(best.sqlite3)} records/s (${Math.round(best.sqlite3)} ms)`);
  for (const format of ["ndjson", "csv"] as const) {
    console.log(`price-service import ${format.padEnd(6)}: ${rate(best[format])} records/s (${Math.round(best[format])} ms), ${(best.sqlite3 / best[format]).toFixed(2)}× sqlite3`);
  }
} finally {
  rmSync(directory, { recursive: true, force: true });
}
