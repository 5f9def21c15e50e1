// The data endpoint's own cost, without an HTTP server: the same stages as bench/lookup.ts, run
// through app.handle() on a SQLite file in this process. Beside lookup.ts's figures (the service
// behind Bun's HTTP server, driven by wrk) it tells the app's work from the server's.
//
// Usage: bun bench/in-process.ts [--seconds 3] [--rounds 3] [--concurrency 32] [--products 20000] [--stages billed]
// Each stage keeps `concurrency` requests in flight (so a billed stage's group commits are that
// large), checks every answer's status (and that a billed one was billed), and reports requests
// per second and this process's CPU per request (user and system), medians over the rounds.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createApp } from "../src/app";
import { loadConfig } from "../src/config";
import { systemClock } from "../src/lib/clock";
import { createLogger } from "../src/lib/logger";
import { demoGTINsOf, seedDemo } from "../src/modules/ingest/demo-data";
import { createServices, openStore } from "../src/services";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "3" },
    rounds: { type: "string", default: "3" },
    concurrency: { type: "string", default: "32" },
    products: { type: "string", default: "20000" },
    stages: { type: "string", default: "healthz,400,billed" },
  },
});
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const concurrency = Number(values.concurrency);
const productCount = Number(values.products);

const work = mkdtempSync(join(tmpdir(), "price-bench-in-process-"));
const databaseUrl = `sqlite:${join(work, "bench.db")}`;
const seeding = await openStore(databaseUrl);
const demo = await seedDemo(seeding, { products: productCount, credits: 1_000_000_000, keyPrefix: "pps_", now: Date.now(), freshnessWindowMs: 24 * 3_600_000 });
await seeding.close();

// As bench/lookup.ts runs the service: production settings, a rate limit that never refuses.
const config = loadConfig({ PRICE_ENV: "production", LOG_LEVEL: "warn", DATABASE_URL: databaseUrl, RATE_LIMIT: "1000000000/s" });
const store = await openStore(databaseUrl);
const app = createApp(createServices({ config, store, clock: systemClock, logger: createLogger({ level: "warn" }) }));
const headers = { authorization: `Bearer ${demo.clearKey}` };
const fresh = demoGTINsOf("fresh", productCount).map((gtin) => `http://localhost/api/v1/products/${gtin}/price`);

const stages: Array<{ name: string; url: () => string; status: number; billed?: true }> = [
  { name: "healthz", url: () => "http://localhost/healthz", status: 200 },
  { name: "400", url: () => "http://localhost/api/v1/products/123/price", status: 400 },
  { name: "billed", url: () => fresh[Math.floor(Math.random() * fresh.length)]!, status: 200, billed: true },
];

// Every product's answer prepared once, as in a running service (and as lookup.ts's warm-up does).
for (const url of fresh) await app.handle(new Request(url, { headers }));

async function run(stage: (typeof stages)[number], runSeconds: number) {
  let requests = 0;
  const end = performance.now() + runSeconds * 1000;
  const cpuBefore = process.cpuUsage();
  const startedAt = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < end) {
        const response = await app.handle(new Request(stage.url(), { headers }));
        const body = await response.text();
        if (response.status !== stage.status || (stage.billed && !body.includes('"reason":"fresh-offer"')))
          throw new Error(`${stage.name}: HTTP ${response.status} ${body}`);
        requests++;
      }
    }),
  );
  const cpu = process.cpuUsage(cpuBefore);
  return { rps: requests / ((performance.now() - startedAt) / 1000), userUs: cpu.user / requests, systemUs: cpu.system / requests };
}

const median = (numbers: number[]) => [...numbers].sort((a, b) => a - b)[Math.floor(numbers.length / 2)]!;
console.log(
  `price-service in-process benchmark: ${productCount} products, ${concurrency} requests in flight, ${seconds} s per stage, ${rounds} round(s), medians`,
);
for (const stage of stages.filter((candidate) => values.stages.split(",").includes(candidate.name))) {
  await run(stage, 1);
  const results = [];
  for (let round = 0; round < rounds; round++) results.push(await run(stage, seconds));
  const user = median(results.map((result) => result.userUs));
  const system = median(results.map((result) => result.systemUs));
  console.log(
    `${stage.name.padEnd(8)} ${median(results.map((result) => result.rps))
      .toFixed(0)
      .padStart(
        7,
      )} req/s  CPU ${median(results.map((result) => result.userUs + result.systemUs)).toFixed(1)} µs/req (user ${user.toFixed(1)}, system ${system.toFixed(1)})`,
  );
}
await store.close();
rmSync(work, { recursive: true, force: true });
