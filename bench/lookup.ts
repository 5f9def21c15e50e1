// Billed look-ups per second and p99 beside /healthz, in one run, on 20k products.
// Usage: bun bench/lookup.ts [--connections 32] [--seconds 10] [--products 20000] [--database-url URL]
// The server runs as its own process (as in production); autocannon runs in this one.
import autocannon from "autocannon";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { demoGTIN } from "../src/modules/ingest/demo-data";

const { values } = parseArgs({
  options: {
    connections: { type: "string", default: "32" },
    seconds: { type: "string", default: "10" },
    products: { type: "string", default: "20000" },
    "database-url": { type: "string" },
    instances: { type: "string", default: "1" },
  },
});
const connections = Number(values.connections);
const duration = Number(values.seconds);
const productCount = Number(values.products);
const work = mkdtempSync(join(tmpdir(), "price-bench-"));
const databaseUrl = values["database-url"] ?? `sqlite:${join(work, "bench.db")}`;
const env = { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "warn", RATE_LIMIT: "1000000/s", PRICE_ENV: "production" };
const cli = (args: string[]) => {
  const result = Bun.spawnSync([process.execPath, "src/main.ts", ...args], { env, stderr: "inherit" });
  if (result.exitCode !== 0) throw new Error(`price-service ${args.join(" ")} failed`);
  return result.stdout.toString();
};

const seed = JSON.parse(cli(["seed", "--demo", "--products", String(productCount), "--credits", "100000000", "--json"]));
const ports = Array.from({ length: Number(values.instances) }, (_, index) => 18900 + index);
const servers = ports.map((port) => Bun.spawn([process.execPath, "src/main.ts", "serve", "--port", String(port)], { env, stdout: "ignore", stderr: "inherit" }));
for (const port of ports) {
  for (let attempt = 0; attempt < 100; attempt++) {
    if (await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.ok, () => false)) break;
    await Bun.sleep(100);
  }
}

// Products whose index is not a multiple of 7 or 10 have fresh offers (see demoFeed).
const freshGTINs = Array.from({ length: productCount }, (_, i) => i + 1).filter((i) => i % 7 !== 0 && i % 10 !== 0).map(demoGTIN);

async function run(title: string, path: () => string, headers: Record<string, string> = {}) {
  let next = 0;
  const result = await autocannon({
    url: `http://127.0.0.1:${ports[0]}`,
    connections,
    duration,
    headers,
    requests: [{ setupRequest: (request: any) => ({ ...request, path: path() }) }],
    // Spread connections over the instances when there are several.
    ...(ports.length > 1 ? { url: ports.map((port) => `http://127.0.0.1:${port}`) } : {}),
  } as any);
  const non2xx = result.non2xx + result.errors;
  console.log(`${title.padEnd(16)} ${Math.round(result.requests.average).toString().padStart(7)} req/s  p50 ${result.latency.p50} ms  p99 ${result.latency.p99} ms  errors/non-2xx ${non2xx}`);
  return result;
}

console.log(`price-service benchmark: ${productCount} products, ${connections} connections, ${duration}s each, ${ports.length} instance(s), ${databaseUrl.split(":")[0]}`);
const health = await run("GET /healthz", () => "/healthz");
const priced = await run("billed look-up", () => `/api/v1/products/${freshGTINs[Math.floor(Math.random() * freshGTINs.length)]}/price`, { authorization: `Bearer ${seed.clearKey}` });
console.log(`billed look-ups at ${Math.round((100 * priced.requests.average) / health.requests.average)}% of /healthz throughput`);

for (const server of servers) server.kill("SIGTERM");
await Promise.all(servers.map((server) => server.exited));
const balance = JSON.parse(cli(["credits", "balance", "--org", seed.organizationId, "--json"]));
console.log(`credits billed: ${100000000 - balance.available}, reserved left: ${balance.reserved}`);
if (databaseUrl.startsWith("sqlite:")) rmSync(work, { recursive: true, force: true });
