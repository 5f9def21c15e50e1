import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { newId } from "../../src/lib/ids";
import { runCLIAsync, seedDatabase, sourcesWithPreload, spawnServe, type SeededDatabase, type ServeProcess } from "../support/service-process";
import { packOrder } from "../support/context";

// The operator CLI beside a running `serve` on one SQLite file: the server's holds live in its
// memory, so a CLI read must write nothing and a CLI write may only add credits.
let directory: string;
let databasePath: string;
let databaseUrl: string;
let seed: SeededDatabase;
let serve: ServeProcess | undefined;

beforeEach(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-beside-serve-"));
  databasePath = join(directory, "service.db");
  databaseUrl = `sqlite:${databasePath}`;
  seed = await seedDatabase(databaseUrl, 0);
});

afterEach(async () => {
  serve?.child.kill("SIGKILL");
  await serve?.child.exited;
  serve = undefined;
  rmSync(directory, { recursive: true, force: true });
});

function read<T>(query: string): T[] {
  const database = new Database(databasePath, { readonly: true });
  try {
    return database.query(query).all() as T[];
  } finally {
    database.close();
  }
}

/** Grants credits through a connection of this process, as another process would. */
async function grant(amount: number, expiresAt: number | null): Promise<void> {
  const store = SQLiteStore.open(databaseUrl);
  await store.grantCredits({ organizationId: seed.organizationId, source: "grant", type: "grant", amount, expiresAt, description: "test", now: Date.now() });
  await store.close();
}

/** A local order for a pack of `credits`, waiting for `orders complete`. */
async function pendingOrder(credits: number): Promise<string> {
  const store = SQLiteStore.open(databaseUrl);
  const id = newId("ord", Date.now());
  await store.createOrder(packOrder({ id, organizationId: seed.organizationId, credits, amount: 300, now: Date.now() }));
  await store.close();
  return id;
}

function lookUp(): Promise<Response> {
  return fetch(`${serve!.url}/api/v1/products/${seed.gtin}/price`, { headers: { authorization: `Bearer ${seed.clearKey}` } });
}

function expectLedgerToAgreeWithBuckets(): void {
  const [buckets] = read<{ remaining: number; negative: number }>("SELECT sum(remaining) AS remaining, sum(remaining < 0) AS negative FROM credit_buckets");
  const [ledger] = read<{ sum: number; running: number }>(
    "SELECT (SELECT sum(amount) FROM credit_transactions) AS sum, (SELECT sum(ledger_balance) FROM organizations) AS running",
  );
  expect(buckets!.negative).toBe(0);
  expect(ledger!.sum).toBe(buckets!.remaining);
  expect(ledger!.running).toBe(buckets!.remaining);
}

describe("the operator CLI beside a serving process", () => {
  test("credits balance writes nothing, even when a credit the server holds has expired meanwhile, and the server's debit keeps the bucket at zero", async () => {
    serve = await spawnServe({ databaseUrl, target: sourcesWithPreload("./test/fixtures/slow-lookup.ts"), env: { SLOW_LOOKUP_MS: "4000" } });
    const expiresAt = Date.now() + 1000;
    await grant(1, expiresAt);
    const inFlight = lookUp();
    await serve.waitForStderr("slow look-up started");
    await Bun.sleep(Math.max(0, expiresAt - Date.now()) + 100);

    const ledgerRows = read<{ n: number }>("SELECT count(*) AS n FROM credit_transactions")[0]!.n;
    const balance = await runCLIAsync(["credits", "balance", "--org", seed.organizationId, "--json"], { DATABASE_URL: databaseUrl });
    expect(balance.code).toBe(0);
    expect(JSON.parse(balance.stdout)).toMatchObject({ available: 0, buckets: [] });
    expect(read<{ n: number }>("SELECT count(*) AS n FROM credit_transactions")[0]!.n).toBe(ledgerRows);

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(((await response.json()) as { meta: { creditsConsumed: number } }).meta.creditsConsumed).toBe(1);
    expectLedgerToAgreeWithBuckets();
  }, 20_000);

  test("credits grant and orders complete run while a request holds credits, and the held credit is debited once", async () => {
    await grant(1, null);
    const orderId = await pendingOrder(3);
    serve = await spawnServe({ databaseUrl, target: sourcesWithPreload("./test/fixtures/slow-lookup.ts"), env: { SLOW_LOOKUP_MS: "2500" } });
    const inFlight = lookUp();
    await serve.waitForStderr("slow look-up started");

    const granted = await runCLIAsync(["credits", "grant", "--org", seed.organizationId, "--amount", "5"], { DATABASE_URL: databaseUrl });
    expect(granted.code).toBe(0);
    const completed = await runCLIAsync(["orders", "complete", orderId, "--json"], { DATABASE_URL: databaseUrl });
    expect(completed.code).toBe(0);
    expect(JSON.parse(completed.stdout)).toMatchObject({ granted: true });

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(((await response.json()) as { meta: { creditsConsumed: number } }).meta.creditsConsumed).toBe(1);
    const balance = await runCLIAsync(["credits", "balance", "--org", seed.organizationId, "--json"], { DATABASE_URL: databaseUrl });
    expect(JSON.parse(balance.stdout)).toMatchObject({ available: 8, reserved: 0 });
    expectLedgerToAgreeWithBuckets();
  }, 20_000);
});
