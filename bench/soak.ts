// Sustained mixed traffic against one server process: billed look-ups, key management and billing
// reads. Reports throughput, p50/p99, errors (must be 0) and the server's memory after a warm-up,
// after the first third of the run (its caches filled) and at the end; what it grows over the last
// two thirds must stay within --max-growth-mb. With --postgres the store is a fresh schema of that
// database (dropped at the end), so the PostgreSQL path's memory is watched too.
// Usage: bun bench/soak.ts [--minutes 3] [--connections 16] [--max-growth-mb 64]
//          [--postgres postgres://postgres@127.0.0.1:5432/test]
import autocannon from "autocannon";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import postgres from "postgres";
import { demoGTINsOf } from "../src/modules/ingest/demo-data";

const { values } = parseArgs({
  options: {
    minutes: { type: "string", default: "3" },
    connections: { type: "string", default: "16" },
    "max-growth-mb": { type: "string", default: "64" },
    postgres: { type: "string" },
  },
});
const work = mkdtempSync(join(tmpdir(), "price-soak-"));
const port = 19500 + Math.floor(Math.random() * 400);
const base = `http://127.0.0.1:${port}`;
const schema = `soak_${process.pid}`;
const admin = values.postgres === undefined ? null : postgres(values.postgres, { max: 1, onnotice: () => {} });
await admin?.unsafe(`CREATE SCHEMA ${schema}`);
const env = {
  ...process.env,
  DATABASE_URL: admin === null ? `sqlite:${join(work, "soak.db")}` : schemaUrl(values.postgres!),
  LOG_LEVEL: "warn",
  RATE_LIMIT: "1000000/s",
  PRICE_ENV: "development",
  PUBLIC_URL: base,
};
function schemaUrl(base: string): string {
  const url = new URL(base);
  url.searchParams.set("search_path", schema);
  return url.toString();
}
const cli = (args: string[]) => {
  const result = Bun.spawnSync([process.execPath, "src/main.ts", ...args], { env, stderr: "inherit" });
  if (result.exitCode !== 0) throw new Error(`price-service ${args.join(" ")} failed`);
  return result.stdout.toString();
};

const seed = JSON.parse(cli(["seed", "--demo", "--products", "5000", "--credits", "100000000", "--json"]));
cli(["orgs", "add-member", "--org", seed.organizationId, "--email", "soak@example.com", "--json"]);
const server = Bun.spawn([process.execPath, "src/main.ts", "serve", "--port", String(port)], { env, stdout: "ignore", stderr: "inherit" });
for (
  let i = 0;
  i < 100 &&
  !(await fetch(`${base}/healthz`).then(
    (r) => r.ok,
    () => false,
  ));
  i++
)
  await Bun.sleep(100);
const signIn = await fetch(`${base}/api/v1/auth/dev-login`, {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ email: "soak@example.com" }),
});
const cookie = signIn.headers.get("set-cookie")!.split(";")[0]!;

const rssMB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${server.pid}/status`, "utf8"))![1]) / 1024;
const fresh = demoGTINsOf("fresh", 5000);
const pick = <T>(items: T[]): T => items[Math.floor(Math.random() * items.length)]!;
const keyAuth = { authorization: `Bearer ${seed.clearKey}` };
let created = 0;

/** One request of the mix: 80 % look-ups, 8 % balance, 6 % transactions, 4 % key list, 2 % key creation. */
function nextRequest(): { method: string; path: string; headers: Record<string, string>; body?: string } {
  const roll = Math.random();
  if (roll < 0.8) return { method: "GET", path: `/api/v1/products/${pick(fresh)}/price`, headers: keyAuth };
  if (roll < 0.88) return { method: "GET", path: "/api/v1/customer/billing/balance", headers: keyAuth };
  if (roll < 0.94) return { method: "GET", path: "/api/v1/customer/billing/transactions?limit=50", headers: { cookie } };
  if (roll < 0.98) return { method: "GET", path: "/api/v1/customer/api-keys?limit=20", headers: { cookie } };
  created++;
  return {
    method: "POST",
    path: "/api/v1/customer/api-keys",
    headers: { cookie, "content-type": "application/json" },
    body: JSON.stringify({ name: `soak ${created}` }),
  };
}

async function load(seconds: number) {
  return autocannon({
    url: base,
    connections: Number(values.connections),
    duration: seconds,
    requests: [{ setupRequest: (request: any) => ({ ...request, ...nextRequest() }) }],
  } as any);
}

await load(10); // warm-up: JIT, SQLite pages
const startRSS = rssMB();
const started = Date.now();
// The first third fills the caches (products, keys, answers, each bounded); a leak keeps growing after it.
const seconds = Number(values.minutes) * 60;
const filling = await load(Math.round(seconds / 3));
const filledRSS = rssMB();
const rest = await load(seconds - Math.round(seconds / 3));
const endRSS = rssMB();
const result = {
  errors: filling.errors + rest.errors,
  non2xx: filling.non2xx + rest.non2xx,
  timeouts: filling.timeouts + rest.timeouts,
  requests: { total: filling.requests.total + rest.requests.total },
};
server.kill("SIGTERM");
const exitCode = await server.exited;
rmSync(work, { recursive: true, force: true });
await admin?.unsafe(`DROP SCHEMA ${schema} CASCADE`);
await admin?.end();

const errors = result.errors + result.non2xx + result.timeouts;
const growth = endRSS - filledRSS;
const signed = (mb: number) => `${mb >= 0 ? "+" : ""}${mb.toFixed(0)} MB`;
console.log(
  `soak: ${admin === null ? "SQLite" : "PostgreSQL"}, ${Math.round((Date.now() - started) / 1000)} s, ${values.connections} connections, mixed traffic (80% billed look-ups)`,
);
console.log(
  `  throughput ${Math.round(result.requests.total / seconds)} req/s, ${result.requests.total} requests, p50 ${rest.latency.p50} ms, p99 ${rest.latency.p99} ms (after the first third)`,
);
console.log(`  errors ${errors} (non-2xx ${result.non2xx}, socket errors ${result.errors}, timeouts ${result.timeouts})`);
console.log(
  `  server RSS ${startRSS.toFixed(0)} MB after warm-up → ${filledRSS.toFixed(0)} MB after the first third (${signed(filledRSS - startRSS)}) → ${endRSS.toFixed(0)} MB at the end (${signed(growth)}; bound ${values["max-growth-mb"]} MB); ${created} keys created; exit ${exitCode}`,
);
process.exit(errors === 0 && growth <= Number(values["max-growth-mb"]) && exitCode === 0 ? 0 : 1);
