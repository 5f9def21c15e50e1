import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer } from "../../src/server";
import { addProduct, createOrganization, createTestContext } from "../support/context";
import { seedDatabase, sourcesWithPreload, spawnServe, type SeededDatabase, type ServeProcess } from "../support/service-process";

let directory: string;
let databasePath: string;
let seed: SeededDatabase;
let serve: ServeProcess | undefined;

describe.each(["SIGTERM", "SIGINT"] as const)("serve receiving %s", (signal) => {
  beforeEach(async () => {
    directory = mkdtempSync(join(tmpdir(), "price-shutdown-"));
    databasePath = join(directory, "service.db");
    seed = await seedDatabase(`sqlite:${databasePath}`, 10);
  });
  afterEach(() => {
    serve?.child.kill("SIGKILL");
    rmSync(directory, { recursive: true, force: true });
  });

  test("answers the request in flight, refuses new connections, flushes lastUsedAt, closes the database and exits 0", async () => {
    serve = await spawnServe({
      databaseUrl: `sqlite:${databasePath}`,
      target: sourcesWithPreload("./test/fixtures/slow-lookup.ts"),
      env: { SLOW_LOOKUP_MS: "1500" },
    });
    const inFlight = fetch(`${serve.url}/api/v1/products/${seed.gtin}/price`, { headers: { authorization: `Bearer ${seed.clearKey}` } });
    await serve.waitForStderr("slow look-up started");

    serve.child.kill(signal);
    await Bun.sleep(200);
    const refused = await fetch(`${serve.url}/healthz`).then(
      (response) => `answered ${response.status}`,
      () => "refused",
    );
    expect(refused).toBe("refused");

    const response = await inFlight;
    expect(response.status).toBe(200);
    const body = (await response.json()) as { meta: { reason: string; creditsRemaining: number; requestId: string } };
    expect(body.meta).toMatchObject({ reason: "fresh-offer", creditsRemaining: 9 });
    expect(await serve.child.exited).toBe(0);

    expect(serve.stdout()).toContain(`"message":"shutting down","signal":"${signal}"`);
    console.log(serve.stdout());
    const accessLine = serve
      .stdout()
      .split("\n")
      .find((line) => line.includes(body.meta.requestId) && line.includes('"message":"request"'));
    expect(JSON.parse(accessLine!)).toMatchObject({
      status: 200,
      route: "/api/v1/products/:gtin/price",
      keyPrefix: seed.clearKey.slice(0, 8),
      reason: "fresh-offer",
    });

    // Checkpointed on close: every write is in the main file (an emptied -wal may stay behind).
    expect(existsSync(`${databasePath}-wal`) ? statSync(`${databasePath}-wal`).size : 0).toBe(0);
    const database = new Database(databasePath, { readonly: true });
    const usage = database.query("SELECT amount, request_id FROM credit_transactions WHERE type = 'usage'").all();
    const key = database.query<{ last_used_at: number | null }, [string]>("SELECT last_used_at FROM api_keys WHERE id = ?").get(seed.keyId);
    database.close();
    expect(usage).toEqual([{ amount: -1, request_id: body.meta.requestId }]);
    expect(key!.last_used_at).toBeGreaterThan(Date.now() - 60_000);
  });
});

describe("stop() with a request that never finishes", () => {
  test("closes its connection after the grace period and still closes the store", async () => {
    const context = await createTestContext();
    const org = await createOrganization(context, 5);
    await addProduct(context, "04006381333931", [{ merchantId: "m-1", price: 100, ageMs: 1000 }]);
    const asked = Promise.withResolvers<void>();
    context.store.findProductWithOffers = () => {
      asked.resolve();
      return new Promise(() => {});
    };
    const server = await startServer(context.services, { port: 0, hostname: "127.0.0.1", shutdownGraceMs: 300 });
    const stuck = fetch(`${server.url}/api/v1/products/4006381333931/price`, { headers: org.auth }).then(
      (response) => `answered ${response.status}`,
      () => "connection closed",
    );
    await asked.promise;
    const startedAt = performance.now();
    await server.stop();
    expect(performance.now() - startedAt).toBeLessThan(2000);
    expect(await stuck).toBe("connection closed");
    expect(await context.store.isReachable()).toBe(false);
    expect(context.logs.join("")).toContain("closing their connections");
  });
});

describe("stop() after a client went away mid-request", () => {
  test("finishes that request's debit before it closes the store, so no credits stay held", async () => {
    const context = await createTestContext();
    const org = await createOrganization(context, 5);
    await addProduct(context, "04006381333931", [{ merchantId: "m-1", price: 100, ageMs: 1000 }]);
    const find = context.store.findProductWithOffers.bind(context.store);
    const asked = Promise.withResolvers<void>();
    const clientGone = Promise.withResolvers<void>();
    context.store.findProductWithOffers = async (gtin) => {
      asked.resolve();
      await clientGone.promise;
      return find(gtin);
    };
    const commit = context.store.commitReservation.bind(context.store);
    const commits: boolean[] = [];
    context.store.commitReservation = async (...args) => {
      const committed = await commit(...args);
      commits.push(committed);
      return committed;
    };
    const server = await startServer(context.services, { port: 0, hostname: "127.0.0.1" });
    const client = new AbortController();
    const gone = fetch(`${server.url}/api/v1/products/4006381333931/price`, { headers: org.auth, signal: client.signal }).then(
      (response) => `answered ${response.status}`,
      () => "aborted",
    );
    await asked.promise;
    client.abort();
    expect(await gone).toBe("aborted");
    clientGone.resolve();
    await server.stop();
    expect(commits).toEqual([true]);
    expect(context.logs.join("")).not.toContain("failed");
  });
});
