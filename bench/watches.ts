// Import speed with and without price watches, in the same run, on both stores:
// `bun bench/watches.ts [--records N] [--rounds N] [--postgres URL | --sqlite-only]`.
// Each round loads a catalogue (N records: N/4 products × 4 merchants), then times a second import
// of the same records with every price changed, on a fresh database, once without watches and once
// with 10 000 active watches on 5 000 of its products (one on a merchant's offer, one on the best
// price across merchants). The watches' evaluation (events, debits) runs after the import, off its
// transaction, and is timed apart. Prints the best round of each, and the ratio with/without.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import postgres from "postgres";
import type { Store } from "../src/db/store";
import { SQLiteStore } from "../src/db/sqlite-store";
import { PostgresStore } from "../src/db/postgres-store";
import { gtin13 } from "../src/modules/ingest/demo-data";
import { importFeed } from "../src/modules/ingest/import-feed";
import { openStore } from "../src/services";
import { cpuBetween, cpuOf, postgresPids } from "./process-cpu";

const { values } = parseArgs({
  options: {
    records: { type: "string", default: "200000" },
    rounds: { type: "string", default: "2" },
    postgres: { type: "string", default: process.env.TEST_DATABASE_URL || "postgres://postgres@127.0.0.1:5432/test" },
    "sqlite-only": { type: "boolean", default: false },
  },
});
const count = Number(values.records);
const rounds = Number(values.rounds);
const WATCHED_PRODUCTS = 5_000;
const directory = mkdtempSync(join(tmpdir(), "bench-watches-"));

function feed(name: string, cents: (index: number) => number, observedAt: string): string {
  const path = join(directory, name);
  const lines: string[] = [];
  for (let index = 0; index < count; index++) {
    const gtin = gtin13(`400${String(Math.floor(index / 4)).padStart(9, "0")}`);
    const merchant = `shop-${index % 4}`;
    lines.push(
      JSON.stringify({
        gtin,
        title: `Product ${index >> 2}`,
        brand: "Acme",
        merchantId: merchant,
        merchantName: `Shop ${index % 4}`,
        price: (cents(index) / 100).toFixed(2),
        currency: "EUR",
        shipping: "4.90",
        availability: "in_stock",
        condition: "new",
        url: `https://shop.example/p/${index}`,
        observedAt,
      }),
    );
  }
  writeFileSync(path, lines.join("\n"));
  return path;
}

const now = Date.now();
const initial = feed("initial.ndjson", (index) => 100 + (index % 5000), new Date(now - 7_200_000).toISOString());
const changed = feed("changed.ndjson", (index) => 99 + (index % 5000), new Date(now - 3_600_000).toISOString());
const products = Math.ceil(count / 4);
const watchedGTINs = Array.from({ length: Math.min(WATCHED_PRODUCTS, products) }, (_, index) =>
  gtin13(`400${String(index * Math.floor(products / WATCHED_PRODUCTS || 1)).padStart(9, "0")}`).padStart(14, "0"),
);

/** Wall and CPU milliseconds of one import: this process's CPU, and on PostgreSQL its server's (every backend: the machine should be otherwise idle). */
interface Timing {
  wall: number;
  cpu: number;
}

async function importFile(store: Store, path: string, at: number): Promise<Timing> {
  const pids = store.dialect === "postgres" ? postgresPids() : [];
  const serverBefore = cpuOf(pids);
  const cpuStarted = process.cpuUsage();
  const started = performance.now();
  const report = await importFeed(store, Bun.file(path).stream(), { format: "ndjson", now: at });
  const wall = performance.now() - started;
  const cpu = process.cpuUsage(cpuStarted);
  if (report.rejectedCount !== 0 || report.offers !== count) throw new Error(`import: ${JSON.stringify({ ...report, rejected: report.rejected.slice(0, 3) })}`);
  return { wall, cpu: (cpu.user + cpu.system) / 1000 + cpuBetween(serverBefore, cpuOf(pids)) / 1000 };
}

/** 10 000 watches on 5 000 products, written in bulk (the API's path costs a transaction each). */
async function addWatches(store: Store, organizationId: string): Promise<void> {
  const rows = watchedGTINs.flatMap((gtin, index) => [
    [`wch_bench${String(index).padStart(6, "0")}a`, gtin, "shop-0", "any-change"],
    [`wch_bench${String(index).padStart(6, "0")}b`, gtin, null, "price-drop"],
  ]);
  const json = JSON.stringify(rows.map(([id, gtin, merchant, trigger]) => ({ id, gtin, merchant, trigger })));
  if (store instanceof SQLiteStore) {
    store.connection
      .query(
        `INSERT INTO price_watches (id, organization_id, gtin, merchant_id, trigger, status, armed, created_at)
         SELECT value ->> 'id', ?1, value ->> 'gtin', value ->> 'merchant', value ->> 'trigger', 'active', 1, ?2 FROM json_each(?3)`,
      )
      .run(organizationId, now, json);
  } else if (store instanceof PostgresStore) {
    await store.connection`
      INSERT INTO price_watches (id, organization_id, gtin, merchant_id, trigger, status, armed, created_at)
      SELECT id, ${organizationId}, gtin, merchant, trigger, 'active', true, ${now}
      FROM jsonb_to_recordset(${json}::text::jsonb) AS t(id text, gtin text, merchant text, trigger text)`;
  }
}

interface Run {
  import: Timing;
  evaluationMs: number;
  events: number;
}

async function run(open: () => Promise<{ store: Store; drop: () => Promise<void> }>, withWatches: boolean): Promise<Run> {
  const { store, drop } = await open();
  try {
    await importFile(store, initial, now - 7_200_000);
    await store.refreshCatalogStatistics();
    const organization = await store.createOrganization({ name: "bench", now });
    await store.grantCredits({
      organizationId: organization.id,
      source: "grant",
      type: "grant",
      amount: 1_000_000,
      expiresAt: null,
      description: "bench",
      now,
    });
    if (withWatches) await addWatches(store, organization.id);
    const timing = await importFile(store, changed, now - 3_600_000);
    const started = performance.now();
    let events = 0;
    for (;;) {
      const result = await store.runWatchEvaluation({ now, limit: 500, creditCost: 1, freshnessWindowMs: 86_400_000 });
      events += result.events;
      if (result.changes === 0) break;
    }
    return { import: timing, evaluationMs: performance.now() - started, events };
  } finally {
    await store.close();
    await drop();
  }
}

async function openSQLite() {
  const path = join(directory, `bench-${crypto.randomUUID()}.db`);
  return { store: SQLiteStore.open(`sqlite:${path}`) as Store, drop: async () => rmSync(path, { force: true }) };
}

async function openPostgres() {
  const name = `bench_watches_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = postgres(values.postgres!, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE SCHEMA ${name}`);
  const url = new URL(values.postgres!);
  url.searchParams.set("search_path", name);
  const store = await openStore(url.toString());
  return {
    store,
    drop: async () => {
      await admin.unsafe(`DROP SCHEMA ${name} CASCADE`);
      await admin.end();
    },
  };
}

try {
  const stores: Array<[string, () => Promise<{ store: Store; drop: () => Promise<void> }>]> = [["SQLite", openSQLite]];
  if (!values["sqlite-only"]) stores.push(["PostgreSQL", openPostgres]);
  console.log(
    `${count} records (${products} products × 4 merchants), every price changed; ${watchedGTINs.length * 2} watches on ${watchedGTINs.length} products`,
  );
  for (const [name, open] of stores) {
    // Alternate the runs and keep each one's best: the machine is shared.
    const without: Timing = { wall: Infinity, cpu: Infinity };
    const withWatches: Timing = { wall: Infinity, cpu: Infinity };
    let evaluation = { ms: Infinity, events: 0 };
    for (let round = 0; round < rounds; round++) {
      const plain = await run(open, false);
      without.wall = Math.min(without.wall, plain.import.wall);
      without.cpu = Math.min(without.cpu, plain.import.cpu);
      const watched = await run(open, true);
      withWatches.wall = Math.min(withWatches.wall, watched.import.wall);
      withWatches.cpu = Math.min(withWatches.cpu, watched.import.cpu);
      if (watched.evaluationMs < evaluation.ms) evaluation = { ms: watched.evaluationMs, events: watched.events };
    }
    const rate = (ms: number) => Math.round(count / (ms / 1000));
    console.log(
      `${name}: import without watches ${rate(without.wall)} records/s (${Math.round(without.wall)} ms, CPU ${Math.round(without.cpu)} ms); ` +
        `with watches ${rate(withWatches.wall)} records/s (${Math.round(withWatches.wall)} ms, CPU ${Math.round(withWatches.cpu)} ms): ` +
        `${(without.wall / withWatches.wall).toFixed(2)}× the speed without by wall time, ${(without.cpu / withWatches.cpu).toFixed(2)}× by CPU time; ` +
        `evaluation afterwards ${Math.round(evaluation.ms)} ms for ${evaluation.events} events`,
    );
  }
} finally {
  rmSync(directory, { recursive: true, force: true });
}
