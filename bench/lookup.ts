// The data endpoint's cost per stage, and billed look-ups on PostgreSQL beside SQLite, in one run.
//
// Each setup starts the service as its own processes (as in production) on a fresh database with
// demo products, and drives it with wrk (1 thread per instance, 32 connections in all), so the load
// generator stays out of the server's process. Per stage: requests per second, p99, and CPU per
// request of the service (all its instances) and of PostgreSQL (every `postgres` process of the
// machine), read from /proc before and after. Figures are medians over the rounds; each stage
// starts with an unmeasured warm-up: each of its paths once on every instance, then 3 s of load
// (1 s with --ci). On PostgreSQL each round starts with a CHECKPOINT: a checkpoint that the writes
// of earlier stages or setups would start during a round is not counted against that round.
//
// Usage: bun bench/lookup.ts [--seconds 8] [--rounds 3] [--connections 32] [--products 20000]
//          [--postgres postgres://postgres@127.0.0.1:5432/test] [--stages billed,batch] [--setups sqlite,pg2] [--ci]
// Stages: healthz, 400, 402, stale, billed (single look-ups), batch (POST batches of 100 fresh GTINs).
// Setups: SQLite, one instance (every stage); with --postgres also PostgreSQL, one instance (every
// stage), two instances with one hot organization, two instances with 50 organizations (billed), and
// two instances each serving an organization of its own (billed: what a second instance costs when
// the two share no row).
// --stages: only these stages (comma-separated), in every setup that has them.
// --setups: only these setups (comma-separated): sqlite, pg, pg2 (one organization), pg2-50, pg2-apart.
// --ci: 1 s per stage, 1 round, 2 000 products: a few seconds that print the goals.
// --write: the run's figures replace the look-up section of docs/performance.md (bench/lookup-table.ts).
// BENCH_PROFILE=DIR: every service process writes a CPU profile (bun --cpu-prof) into DIR on exit.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import postgres from "postgres";
import { SYSTEM_USER_ID } from "../src/db/store";
import { demoGTINsOf, seedDemo } from "../src/modules/ingest/demo-data";
import { createApiKey } from "../src/modules/keys/service";
import { openStore } from "../src/services";
import { goalLines, lookupSection, type MeasuredStage, writeLookupSection } from "./lookup-table";
import { cpuBetween, cpuOf, postgresPids } from "./process-cpu";

const { values } = parseArgs({
  options: {
    seconds: { type: "string" },
    rounds: { type: "string" },
    connections: { type: "string", default: "32" },
    products: { type: "string" },
    postgres: { type: "string" },
    stages: { type: "string" },
    setups: { type: "string" },
    ci: { type: "boolean", default: false },
    write: { type: "boolean", default: false },
  },
});
const ci = values.ci === true;
const seconds = Number(values.seconds ?? (ci ? 1 : 8));
const rounds = Number(values.rounds ?? (ci ? 1 : 3));
const connections = Number(values.connections);
const productCount = Number(values.products ?? (ci ? 2000 : 20000));
const warmUpSeconds = ci ? 1 : 3;
const CREDITS = 1_000_000_000;
const FRESHNESS_MS = 24 * 3_600_000;

if (Bun.spawnSync(["sh", "-c", "command -v wrk"]).exitCode !== 0) {
  console.error("bench/lookup.ts needs wrk (the HTTP load generator): apt-get install -y wrk");
  process.exit(2);
}

const SETUP_NAMES = ["sqlite", "pg", "pg2", "pg2-50", "pg2-apart"] as const;
const unknownSetups = (values.setups?.split(",") ?? []).filter(
  (name) => !SETUP_NAMES.slice(0, values.postgres === undefined ? 1 : undefined).includes(name as never),
);
if (unknownSetups.length > 0) throw new Error(`--setups: no setup ${unknownSetups.join(", ")} (${SETUP_NAMES.join(", ")}; all but sqlite need --postgres)`);
const work = mkdtempSync(join(tmpdir(), "price-bench-"));
interface StageResult {
  requests: number;
  rps: number;
  p99Ms: number;
  errors: number;
  serviceUs: number;
  postgresUs: number | null;
}

interface Target {
  name: string;
  paths: string[];
  keys: string[];
  expect: number;
  /** POST bodies (JSON), one picked at random per request; none: GET. */
  bodies?: string[];
  /** Each wrk thread (one per instance) sends only its own key: keys[thread], not a random one. */
  pinKeys?: boolean;
}

/** One wrk run of `seconds` against the instances; the Lua script picks a random path and key per request. */
async function runWrk(ports: number[], target: Target, serverPids: number[], watchPostgres: boolean, runSeconds = seconds): Promise<StageResult> {
  const script = join(work, `${target.name}.lua`);
  writeFileSync(
    script,
    `local paths = {${target.paths.map((path) => JSON.stringify(path)).join(",")}}
local keys = {${target.keys.map((key) => JSON.stringify(key)).join(",")}}
local ports = {${ports.join(",")}}
local bodies = {${(target.bodies ?? []).map((body) => JSON.stringify(body)).join(",")}}
local pinKeys = ${target.pinKeys === true}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
  thread.addr = wrk.lookup("127.0.0.1", tostring(ports[((counter - 1) % #ports) + 1]))[1]
end
function init(args)
  math.randomseed(os.time() + id * 7919)
end
function request()
  local key = pinKeys and keys[((id - 1) % #keys) + 1] or keys[math.random(#keys)]
  local headers = {}
  if key ~= "" then headers["Authorization"] = "Bearer " .. key end
  if #bodies > 0 then
    headers["Content-Type"] = "application/json"
    return wrk.format("POST", paths[math.random(#paths)], headers, bodies[math.random(#bodies)])
  end
  return wrk.format("GET", paths[math.random(#paths)], headers)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.stderr:write(string.format("WRK %d %d %d %d\\n", summary.requests, summary.duration, latency:percentile(99), e.connect + e.read + e.write + e.timeout))
end
`,
  );
  const postgresBefore = watchPostgres ? cpuOf(postgresPids()) : new Map();
  const serviceBefore = cpuOf(serverPids);
  const wrk = Bun.spawn(
    ["wrk", "-t", String(ports.length), "-c", String(connections), "-d", `${runSeconds}s`, "--timeout", "5s", "-s", script, `http://127.0.0.1:${ports[0]}`],
    {
      stdout: "ignore",
      stderr: "pipe",
    },
  );
  const output = await new Response(wrk.stderr).text();
  await wrk.exited;
  const serviceUs = cpuBetween(serviceBefore, cpuOf(serverPids));
  const postgresUs = watchPostgres ? cpuBetween(postgresBefore, cpuOf(postgresPids())) : null;
  const match = /WRK (\d+) (\d+) (\d+) (\d+)/.exec(output);
  if (match === null) throw new Error(`wrk failed: ${output}`);
  const [requests, durationUs, p99Us, errors] = match.slice(1).map(Number) as [number, number, number, number];
  return {
    requests,
    rps: requests / (durationUs / 1e6),
    p99Ms: p99Us / 1000,
    errors,
    serviceUs: serviceUs / requests,
    postgresUs: postgresUs === null ? null : postgresUs / requests,
  };
}

function median(numbers: number[]): number {
  const sorted = [...numbers].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

interface Setup {
  /** What --setups selects it by. */
  name: (typeof SETUP_NAMES)[number];
  label: string;
  databaseUrl: string;
  instances: number;
  organizations: number;
  stages: Array<"healthz" | "400" | "402" | "stale" | "billed" | "batch">;
  /** Instance i serves only organization i's key. */
  pinKeys?: boolean;
}

const setups: Setup[] = [
  {
    name: "sqlite",
    label: "SQLite, 1 instance",
    databaseUrl: `sqlite:${join(work, "bench.db")}`,
    instances: 1,
    organizations: 1,
    stages: ["healthz", "400", "402", "stale", "billed", "batch"],
  },
];
let admin: postgres.Sql | null = null;
const schemas: string[] = [];
if (values.postgres !== undefined) {
  admin = postgres(values.postgres, { max: 1, onnotice: () => {} });
  const schemaUrl = (name: string) => {
    const url = new URL(values.postgres!);
    url.searchParams.set("search_path", name);
    return url.toString();
  };
  const schema = (suffix: string) => {
    const name = `bench_${process.pid}_${suffix}`;
    schemas.push(name);
    return schemaUrl(name);
  };
  setups.push(
    {
      name: "pg",
      label: "PostgreSQL, 1 instance",
      databaseUrl: schema("one"),
      instances: 1,
      organizations: 1,
      stages: ["healthz", "400", "402", "stale", "billed", "batch"],
    },
    { name: "pg2", label: "PostgreSQL, 2 instances, 1 org", databaseUrl: schema("two"), instances: 2, organizations: 1, stages: ["healthz", "billed"] },
    { name: "pg2-50", label: "PostgreSQL, 2 instances, 50 orgs", databaseUrl: schema("fifty"), instances: 2, organizations: 50, stages: ["billed"] },
    {
      name: "pg2-apart",
      label: "PostgreSQL, 2 instances, own org each",
      databaseUrl: schema("apart"),
      instances: 2,
      organizations: 2,
      stages: ["billed"],
      pinKeys: true,
    },
  );
  for (const name of schemas) await admin.unsafe(`CREATE SCHEMA ${name}`);
}
if (values.setups !== undefined) {
  const only = new Set(values.setups.split(","));
  for (const setup of setups) if (!only.has(setup.name)) setup.stages = [];
}
if (values.stages !== undefined) {
  const only = new Set(values.stages.split(","));
  for (const setup of setups) setup.stages = setup.stages.filter((stage) => only.has(stage));
}

/** Demo products, `organizations` organizations with credits and a key each, and one with no credits. */
async function seed(databaseUrl: string, organizations: number) {
  const store = await openStore(databaseUrl);
  const now = Date.now();
  const demo = await seedDemo(store, { products: productCount, credits: CREDITS, keyPrefix: "pps_", now, freshnessWindowMs: FRESHNESS_MS });
  const keys = [demo.clearKey];
  for (let index = 1; index < organizations; index++) {
    const organization = await store.createOrganization({ name: `Bench ${index}`, now });
    await store.grantCredits({
      organizationId: organization.id,
      source: "grant",
      type: "grant",
      amount: CREDITS,
      expiresAt: null,
      description: "Bench credits",
      now,
    });
    keys.push((await createApiKey(store, { organizationId: organization.id, name: "bench", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now })).clearKey);
  }
  const broke = await store.createOrganization({ name: "No credits", now });
  const brokeKey = (await createApiKey(store, { organizationId: broke.id, name: "bench", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now })).clearKey;
  const organizationIds = [demo.organizationId];
  await store.close();
  return { keys, brokeKey, organizationIds };
}

const pricePath = (gtin: string) => `/api/v1/products/${gtin}/price`;
const freshGTINs = demoGTINsOf("fresh", productCount);
const freshPaths = freshGTINs.map(pricePath);
const stalePaths = demoGTINsOf("stale", productCount).map(pricePath);
/** Batches of 100 distinct fresh GTINs (every one billed), as a repricing client sends them. */
const BATCH_SIZE = 100;
const batchBodies = Array.from({ length: 64 }, () => {
  const picked = new Set<string>();
  while (picked.size < BATCH_SIZE) picked.add(freshGTINs[Math.floor(Math.random() * freshGTINs.length)]!);
  return JSON.stringify({ gtins: [...picked] });
});

/**
 * Each of a look-up target's paths once on every instance, `connections` at a time, so the stage
 * measures the steady state of a running service (products and their prepared answers in memory),
 * not the first look-up of each product: random paths in a few seconds of warm-up miss about a
 * quarter of 20 000 products.
 */
async function visitEveryPath(ports: number[], target: Target) {
  if (target.bodies !== undefined || target.paths.length === 1) return;
  for (const [instance, port] of ports.entries()) {
    const key = target.pinKeys ? target.keys[instance % target.keys.length]! : target.keys[0]!;
    let next = 0;
    const visitor = async () => {
      while (next < target.paths.length) {
        const response = await fetch(`http://127.0.0.1:${port}${target.paths[next++]}`, { headers: { authorization: `Bearer ${key}` } });
        await response.arrayBuffer();
        if (response.status !== target.expect) throw new Error(`warm-up of ${target.name}: expected ${target.expect}, got ${response.status}`);
      }
    };
    await Promise.all(Array.from({ length: connections }, visitor));
  }
}

const results = new Map<string, StageResult>();
let nextPort = 18900 + Math.floor(Math.random() * 500);
console.log(`price-service benchmark: ${productCount} products, wrk ${connections} connections, ${seconds} s per stage, ${rounds} round(s), medians`);
try {
  for (const setup of setups) {
    if (setup.stages.length === 0) continue;
    const seeded = await seed(setup.databaseUrl, setup.organizations);
    const ports = Array.from({ length: setup.instances }, () => nextPort++);
    const env = { ...process.env, DATABASE_URL: setup.databaseUrl, LOG_LEVEL: "warn", RATE_LIMIT: "1000000000/s", PRICE_ENV: "production" };
    const servers = ports.map((port) =>
      Bun.spawn(
        [
          process.execPath,
          ...(process.env.BENCH_PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_PROFILE}`, "--cpu-prof-interval=250"] : []),
          "src/main.ts",
          "serve",
          "--port",
          String(port),
        ],
        { env, stdout: "ignore", stderr: "inherit" },
      ),
    );
    try {
      for (const port of ports) {
        let up = false;
        for (let attempt = 0; attempt < 150 && !up; attempt++) {
          up = await fetch(`http://127.0.0.1:${port}/healthz`).then(
            (r) => r.ok,
            () => false,
          );
          if (!up) await Bun.sleep(100);
        }
        if (!up) throw new Error(`the server on port ${port} did not start`);
      }
      const targets: Record<Setup["stages"][number], Target> = {
        healthz: { name: "healthz", paths: ["/healthz"], keys: [""], expect: 200 },
        "400": { name: "400", paths: ["/api/v1/products/123/price"], keys: seeded.keys, expect: 400 },
        "402": { name: "402", paths: freshPaths, keys: [seeded.brokeKey], expect: 402 },
        stale: { name: "stale", paths: stalePaths, keys: seeded.keys, expect: 200 },
        billed: { name: "billed", paths: freshPaths, keys: seeded.keys, expect: 200, pinKeys: setup.pinKeys },
        batch: { name: "batch", paths: ["/api/v1/products/prices"], keys: seeded.keys, expect: 200, bodies: batchBodies },
      };
      for (const stage of setup.stages) {
        const target = targets[stage];
        const probe = await fetch(`http://127.0.0.1:${ports[0]}${target.paths[0]}`, {
          method: target.bodies === undefined ? "GET" : "POST",
          headers: {
            ...(target.keys[0] ? { authorization: `Bearer ${target.keys[0]}` } : {}),
            ...(target.bodies === undefined ? {} : { "content-type": "application/json" }),
          },
          body: target.bodies?.[0],
        });
        const body = await probe.text();
        if (probe.status !== target.expect) throw new Error(`${setup.label} ${stage}: expected ${target.expect}, got ${probe.status} ${body}`);
        if (stage === "billed" && !body.includes('"reason":"fresh-offer"')) throw new Error(`${setup.label}: not a billed answer: ${body}`);
        if (stage === "stale" && !body.includes('"reason":"stale-data"')) throw new Error(`${setup.label}: not a stale answer: ${body}`);
        if (stage === "batch" && !body.includes(`"creditsConsumed":${BATCH_SIZE},`))
          throw new Error(`${setup.label}: not a billed batch: ${body.slice(0, 500)}`);
        // Unmeasured warm-up: every product once on every instance (as a long-running service has
        // them in memory), then the JIT under load.
        await visitEveryPath(ports, target);
        await runWrk(
          ports,
          target,
          servers.map((server) => server.pid),
          false,
          warmUpSeconds,
        );
        const runs: StageResult[] = [];
        const onPostgres = setup.databaseUrl.startsWith("postgres");
        for (let round = 0; round < rounds; round++) {
          // A checkpoint first, so no round pays for the WAL of the stages and setups before it.
          if (onPostgres) await admin!.unsafe("CHECKPOINT");
          runs.push(
            await runWrk(
              ports,
              target,
              servers.map((server) => server.pid),
              onPostgres,
            ),
          );
        }
        const result: StageResult = {
          requests: median(runs.map((run) => run.requests)),
          rps: median(runs.map((run) => run.rps)),
          p99Ms: median(runs.map((run) => run.p99Ms)),
          errors: runs.reduce((sum, run) => sum + run.errors, 0),
          serviceUs: median(runs.map((run) => run.serviceUs)),
          postgresUs: runs[0]!.postgresUs === null ? null : median(runs.map((run) => run.postgresUs!)),
        };
        results.set(`${setup.label}|${stage}`, result);
        const range = runs.length > 1 ? ` (${Math.round(Math.min(...runs.map((r) => r.rps)))}–${Math.round(Math.max(...runs.map((r) => r.rps)))})` : "";
        console.log(
          `${setup.label.padEnd(38)} ${stage.padEnd(8)} ${Math.round(result.rps).toString().padStart(7)} req/s${range}  p99 ${result.p99Ms.toFixed(1)} ms  service ${result.serviceUs.toFixed(0)} µs/req` +
            (result.postgresUs === null ? "" : `  PostgreSQL ${result.postgresUs.toFixed(0)} µs/req`) +
            (stage === "batch" ? `  = ${Math.round(result.rps * BATCH_SIZE)} items/s, service ${(result.serviceUs / BATCH_SIZE).toFixed(1)} µs/item` : "") +
            (result.errors > 0 ? `  socket errors ${result.errors}` : ""),
        );
      }
    } finally {
      for (const server of servers) server.kill("SIGTERM");
      await Promise.all(servers.map((server) => server.exited));
    }
    // Every credit billed is in the ledger and nothing is left held.
    const store = await openStore(setup.databaseUrl);
    const balance = await store.getBalance(seeded.organizationIds[0]!, Date.now());
    await store.close();
    if (balance.reserved !== 0) throw new Error(`${setup.label}: ${balance.reserved} credits still reserved after shutdown`);
  }
} finally {
  if (admin !== null) {
    for (const name of schemas) await admin.unsafe(`DROP SCHEMA IF EXISTS ${name} CASCADE`);
    await admin.end();
  }
  rmSync(work, { recursive: true, force: true });
}

const stages: MeasuredStage[] = [...results].map(([key, result]) => {
  const [setup, stage] = key.split("|") as [string, string];
  return { setup, stage, ...result };
});
console.log("goals:");
for (const line of goalLines(stages)) console.log(`  ${line}`);

if (values.write) {
  const commit = Bun.spawnSync(["git", "rev-parse", "--short", "HEAD"]).stdout.toString().trim();
  const command = ["bun bench/lookup.ts", ...process.argv.slice(2).map((arg) => (arg.startsWith("postgres://") ? "…" : arg))].join(" ");
  writeLookupSection(lookupSection(stages, command, commit));
  console.log("docs/performance.md: the look-up section is rewritten");
}
