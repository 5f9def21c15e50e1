import { afterAll, beforeAll, expect, test } from "bun:test";
import type { Store } from "../../src/db/store";
import { newId } from "../../src/lib/ids";
import { openStore } from "../../src/services";
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/context";
import { type ServeProcess, spawnServe } from "../support/service-process";
import { feedServer, offerLine } from "./feed-helpers";

// Two real `serve` processes on one PostgreSQL schema with one scheduled URL source: each period of
// the source is pulled by one of them only (the claim is a lease dated by the database's clock).
if (TEST_DATABASE_URL === null) throw new Error("this file needs TEST_DATABASE_URL; run it through `npm test` (scripts/test.ts)");

const INTERVAL_MS = 2000;
let database: TestDatabase;
let operator: Store;
let instances: ServeProcess[] = [];
const server = feedServer(() => new Response(offerLine("04006381333931", "shop-a", "1.99", Date.now())));

beforeAll(async () => {
  database = await createTestDatabase();
  operator = await openStore(database.url);
}, 30_000);

afterAll(async () => {
  for (const instance of instances) instance.child.kill("SIGTERM");
  await Promise.all(instances.map((instance) => instance.child.exited));
  server.stop();
  await operator?.close();
  await database?.drop();
});

test("two instances with one scheduled source pull it once per period", async () => {
  const env = { OUTBOUND_ALLOWED_NETWORKS: "127.0.0.1/32" }; // the feed server is on loopback
  instances = await Promise.all([spawnServe({ databaseUrl: database.url, env }), spawnServe({ databaseUrl: database.url, env })]);
  const created = await operator.createFeedSource({
    id: newId("src"),
    name: "shared",
    kind: "url",
    location: `${server.url}/feed.ndjson`,
    format: null,
    intervalMs: INTERVAL_MS,
    timeoutMs: 1000,
    retries: 0,
    createdAt: Date.now(),
    merchants: ["shop-a"],
    authoritative: false,
  });
  const startedAt = Date.now();
  await Bun.sleep(4 * INTERVAL_MS + 1000);
  // Stopping lets the runs in flight finish and be recorded.
  for (const instance of instances) instance.child.kill("SIGTERM");
  await Promise.all(instances.map((instance) => instance.child.exited));
  const elapsed = Date.now() - startedAt;

  const times = server.requests.map((request) => request.at);
  // One pull when the source is created, then one per period: never two within one period.
  expect(times.length).toBeGreaterThanOrEqual(Math.floor(elapsed / INTERVAL_MS) - 1);
  expect(times.length).toBeLessThanOrEqual(Math.floor(elapsed / INTERVAL_MS) + 1);
  for (let index = 1; index < times.length; index++) expect(times[index]! - times[index - 1]!).toBeGreaterThan(INTERVAL_MS - 500);

  const runs = await operator.listFeedRuns(created!.id, { limit: 100 });
  expect(runs.items.length).toBe(times.length);
  expect(runs.items.every((run) => run.status === "ok" && run.trigger === "schedule")).toBe(true);
  const logged = instances.map(
    (instance) =>
      instance
        .stdout()
        .split("\n")
        .filter((line) => line.includes('"message":"feed run"')).length,
  );
  expect(logged[0]! + logged[1]!).toBe(times.length);
}, 30_000);
