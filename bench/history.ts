// The price history endpoint over HTTP: one product with 50 merchants and a year of daily changes
// (about 18 000 states), on SQLite and on PostgreSQL. The service runs as its own process (`serve`);
// this process sends one request at a time and reports the latency percentiles of each query and
// the service's CPU time per request (from /proc: what a shared machine's load does not inflate).
//
// Usage: bun bench/history.ts [--requests 200] [--merchants 50] [--days 365]
//          [--postgres postgres://postgres@127.0.0.1:5432/test] [--stores sqlite,postgres]
// BENCH_PROFILE=DIR: the service writes a CPU profile (bun --cpu-prof) into DIR when it stops.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import postgres from "postgres";
import { SYSTEM_USER_ID, type FeedRecord } from "../src/db/store";
import { createApiKey } from "../src/modules/keys/service";
import { openStore } from "../src/services";
import { cpuBetween, cpuOf } from "./process-cpu";

const { values } = parseArgs({
  options: {
    requests: { type: "string", default: "200" },
    merchants: { type: "string", default: "50" },
    days: { type: "string", default: "365" },
    postgres: { type: "string", default: "postgres://postgres@127.0.0.1:5432/test" },
    stores: { type: "string", default: "sqlite,postgres" },
  },
});
const requests = Number(values.requests);
const merchantCount = Number(values.merchants);
const dayCount = Number(values.days);
const DAY_MS = 86_400_000;
const GTIN = "04006381333931";
const KEY_PREFIX = "pps_";

/** Every merchant changes its price once a day at its own hour; one in ten changes also flips availability. */
async function seed(databaseUrl: string): Promise<{ clearKey: string; states: number }> {
  const store = await openStore(databaseUrl);
  try {
    const now = Date.now();
    const start = now - dayCount * DAY_MS;
    let seeded = 0;
    for (let day = 0; day < dayCount; day++) {
      const records: FeedRecord[] = [];
      for (let merchant = 0; merchant < merchantCount; merchant++) {
        const observedAt = start + day * DAY_MS + ((merchant * 1_234_567) % DAY_MS);
        if (observedAt >= now) continue;
        const price = 1000 + ((day * 37 + merchant * 101) % 500);
        records.push({
          product: { gtin: GTIN, title: "Benchmark product", brand: "Acme" },
          offer: {
            merchantId: `m-${String(merchant).padStart(2, "0")}`,
            merchantName: `Merchant ${merchant}`,
            priceAmount: price,
            currency: "EUR",
            shippingAmount: 490,
            availability: (day + merchant) % 10 === 0 ? "out_of_stock" : "in_stock",
            condition: "new",
            url: null,
            observedAt,
          },
        });
      }
      await store.applyFeedRecords(records, now);
      seeded += records.length;
    }
    const organization = await store.createOrganization({ name: "bench", now });
    await store.grantCredits({
      organizationId: organization.id,
      source: "grant",
      type: "grant",
      amount: 1_000_000_000,
      expiresAt: null,
      description: "bench",
      now,
    });
    await store.ensureSystemUser(now);
    const { clearKey } = await createApiKey(store, { organizationId: organization.id, name: "bench", createdBy: SYSTEM_USER_ID, keyPrefix: KEY_PREFIX, now });
    return { clearKey, states: seeded };
  } finally {
    await store.close();
  }
}

function percentiles(samples: number[]): string {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return `p50 ${at(0.5).toFixed(1)} ms  p95 ${at(0.95).toFixed(1)} ms  p99 ${at(0.99).toFixed(1)} ms`;
}

async function measure(label: string, url: string, key: string, pid: number): Promise<void> {
  const get = async () => {
    const response = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
    const body = (await response.json()) as { meta: { reason: string }; data: { points: unknown[]; nextCursor: string | null } };
    if (response.status !== 200 || body.meta.reason !== "history") throw new Error(`${label}: ${response.status} ${JSON.stringify(body).slice(0, 300)}`);
    return body;
  };
  for (let i = 0; i < 10; i++) await get();
  const samples: number[] = [];
  const cpuBefore = cpuOf([pid]);
  let points = 0;
  let bytes = 0;
  for (let i = 0; i < requests; i++) {
    const startedAt = performance.now();
    const body = await get();
    samples.push(performance.now() - startedAt);
    points = body.data.points.length;
    if (i === 0) bytes = JSON.stringify(body).length;
  }
  const cpuPerRequest = cpuBetween(cpuBefore, cpuOf([pid])) / requests / 1000;
  console.log(
    `  ${label.padEnd(48)} ${percentiles(samples)}  service CPU ${cpuPerRequest.toFixed(1)} ms/req  (${points} points, ${Math.round(bytes / 1024)} KiB)`,
  );
}

async function run(name: string, databaseUrl: string): Promise<void> {
  const seededAt = performance.now();
  const { clearKey, states } = await seed(databaseUrl);
  console.log(`${name}: ${merchantCount} merchants × ${dayCount} days = ${states} states, seeded in ${((performance.now() - seededAt) / 1000).toFixed(1)} s`);
  const port = 20000 + Math.floor(Math.random() * 20000);
  const env = {
    ...process.env,
    DATABASE_URL: databaseUrl,
    PORT: String(port),
    LOG_LEVEL: "warn",
    PRICE_ENV: "production",
    PUBLIC_URL: `http://127.0.0.1:${port}`,
    RATE_LIMIT: "100000/s",
  };
  const profile = process.env.BENCH_PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`, "--cpu-prof-interval=250"] : [];
  const server = Bun.spawn([process.execPath, ...profile, "src/main.ts", "serve", "--port", String(port)], { env, stdout: "ignore", stderr: "inherit" });
  try {
    for (let attempt = 0; attempt < 100; attempt++) {
      if (
        await fetch(`http://127.0.0.1:${port}/healthz`).then(
          (r) => r.ok,
          () => false,
        )
      )
        break;
      await Bun.sleep(100);
    }
    const base = `http://127.0.0.1:${port}/api/v1/products/${GTIN}/price/history`;
    const from = new Date(Date.now() - dayCount * DAY_MS).toISOString();
    await measure("interval=day, the year, default limit (1000)", `${base}?interval=day&from=${from}`, clearKey, server.pid);
    await measure("interval=day, the year, limit=5000", `${base}?interval=day&from=${from}&limit=5000`, clearKey, server.pid);
    await measure("interval=day, the year, one merchant", `${base}?interval=day&from=${from}&merchant=m-07`, clearKey, server.pid);
    await measure("interval=day, last 30 days (default range)", `${base}?interval=day`, clearKey, server.pid);
    await measure("interval=change, the year, default limit (1000)", `${base}?from=${from}`, clearKey, server.pid);
  } finally {
    server.kill();
    await server.exited;
  }
}

const stores = values.stores!.split(",");
const work = mkdtempSync(join(tmpdir(), "history-bench-"));
try {
  if (stores.includes("sqlite")) await run("SQLite", `sqlite:${join(work, "bench.db")}`);
  if (stores.includes("postgres")) {
    const schema = `bench_history_${process.pid}`;
    const admin = postgres(values.postgres!, { max: 1, onnotice: () => {} });
    await admin.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
    const url = new URL(values.postgres!);
    url.searchParams.set("search_path", schema);
    try {
      await run("PostgreSQL", url.toString());
    } finally {
      await admin.unsafe(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await admin.end();
    }
  }
} finally {
  rmSync(work, { recursive: true, force: true });
}
