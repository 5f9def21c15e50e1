import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { postgresMigrations } from "../../drizzle/embedded";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID, type Store } from "../../src/db/store";
import { createApiKey, rotateApiKey } from "../../src/modules/keys/service";
import { openStore } from "../../src/services";
import { createTestDatabase, ledgerSum, TEST_DATABASE_URL, type TestDatabase } from "../support/context";
import { type ServeProcess, spawnServe } from "../support/service-process";
import { TARGET } from "./harness";

// Two real `serve` processes of the product under test (see ./harness.ts) on one PostgreSQL schema,
// as behind a load balancer, and a third connection playing the operator. PostgreSQL-only (see
// bunfig.toml): scripts/test.ts runs it.
if (TEST_DATABASE_URL === null) throw new Error("this file needs TEST_DATABASE_URL; run it through `npm test` (scripts/test.ts)");

const GTIN = "04006381333931";

let database: TestDatabase;
let instances: ServeProcess[];
let operator: Store;

function price(instance: { url: string }, clearKey: string): Promise<Response> {
  return fetch(`${instance.url}/api/v1/products/${GTIN}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
}

async function newOrganization(credits: number): Promise<{ organizationId: string; keyId: string; clearKey: string }> {
  const now = Date.now();
  const { id: organizationId } = await operator.createOrganization({ name: "Shared Org", now });
  await operator.grantCredits({ organizationId, source: "grant", type: "grant", amount: credits, expiresAt: null, description: "test", now });
  const created = await createApiKey(operator, { organizationId, name: "shared", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });
  return { organizationId, keyId: created.key.id, clearKey: created.clearKey };
}

beforeAll(async () => {
  database = await createTestDatabase();
  // Started together on an empty schema: both run the start-up migration at once.
  instances = await Promise.all([spawnServe({ databaseUrl: database.url, target: TARGET }), spawnServe({ databaseUrl: database.url, target: TARGET })]);
  operator = await openStore(database.url);
  await operator.ensureSystemUser(Date.now());
  await operator.applyFeedRecords(
    [
      {
        product: { gtin: GTIN, title: "Pen" },
        offer: {
          merchantId: "m1",
          merchantName: "Shop",
          priceAmount: 199,
          currency: "EUR",
          shippingAmount: null,
          availability: "in_stock",
          condition: "new",
          url: null,
          observedAt: Date.now(),
        },
      },
    ],
    Date.now(),
  );
}, 60_000);

afterAll(async () => {
  for (const instance of instances ?? []) instance.child.kill("SIGTERM");
  await Promise.all((instances ?? []).map((instance) => instance.child.exited));
  await operator?.close();
  await database?.drop();
});

describe("two instances on one PostgreSQL database", () => {
  test("starting together on an empty database, they apply each migration once", async () => {
    const rows = await (operator as PostgresStore).connection`SELECT count(*)::int AS count FROM __drizzle_migrations`;
    expect(rows[0]!.count).toBe(postgresMigrations.length);
  });

  test("concurrent billable requests at both for one organization bill exactly the granted credits", async () => {
    const granted = 40;
    const org = await newOrganization(granted);
    const responses = await Promise.all(Array.from({ length: 150 }, (_, index) => price(instances[index % 2]!, org.clearKey)));
    const statuses = responses.map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(granted);
    expect(statuses.filter((status) => status === 402)).toHaveLength(150 - granted);

    const balance = await operator.getBalance(org.organizationId, Date.now());
    expect(balance).toMatchObject({ available: 0, reserved: 0 });
    expect(await ledgerSum(operator, org.organizationId)).toBe(balance.available + balance.reserved);
    const usage = (await operator.listTransactions(org.organizationId, { limit: 100, types: ["usage"] })).items;
    expect(usage).toHaveLength(granted);
    expect(new Set(usage.map((row) => row.requestId)).size).toBe(granted);
    // One running sum across both instances: every balance from 39 down to 0 appears exactly once.
    expect(usage.map((row) => row.balanceAfter).sort((a, b) => a - b)).toEqual(Array.from({ length: granted }, (_, index) => index));
  });

  test("a key rotated through a third connection is refused by both on the next request and its replacement accepted by both", async () => {
    const org = await newOrganization(10);
    for (const instance of instances) expect((await price(instance, org.clearKey)).status).toBe(200);

    const rotated = await rotateApiKey(operator, {
      organizationId: org.organizationId,
      id: org.keyId,
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      now: Date.now(),
    });
    for (const instance of instances) {
      const refused = await price(instance, org.clearKey);
      expect(refused.status).toBe(401);
      expect(((await refused.json()) as { detail: string }).detail).toContain("rotated");
      expect((await price(instance, rotated!.clearKey)).status).toBe(200);
    }
  });

  test("lastUsedAt written behind by both instances ends at the later use, whichever flush lands last", async () => {
    const org = await newOrganization(10);
    expect((await price(instances[0]!, org.clearKey)).status).toBe(200);
    const secondUse = Date.now();
    expect((await price(instances[1]!, org.clearKey)).status).toBe(200);
    const after = Date.now();
    // Each instance flushes its own view once a second; wait for both flushes, then for one more.
    await Bun.sleep(2_500);
    const lastUsedAt = (await operator.getApiKeyById(org.keyId))!.lastUsedAt;
    expect(lastUsedAt).not.toBeNull();
    expect(lastUsedAt!).toBeGreaterThanOrEqual(secondUse);
    expect(lastUsedAt!).toBeLessThanOrEqual(after);
  });
});
