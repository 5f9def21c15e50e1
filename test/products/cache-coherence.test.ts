import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { SYSTEM_USER_ID, type Store } from "../../src/db/store";
import type { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createApiKey } from "../../src/modules/keys/service";
import { createServices } from "../../src/services";
import { changesHeard, twoStoresOnOneDatabase, type TwoStores } from "../support/context";

// Both stores keep what the hot path reads in memory: SQLite its keys, products and buckets,
// PostgreSQL the keys and the products read under the current catalog version, and a balance that
// only admits. These tests change the database through a second connection (SQLite: as the operator
// CLI does while `serve` runs; PostgreSQL: another instance) and through the serving store itself,
// and check that the very next request sees the change: on PostgreSQL, the next one after the
// serving instance has heard of it (changesHeard; the notification is sent as the change commits).
const GTIN = "04006381333931";
let stores: TwoStores;
let served: Store;
let operator: Store;
let app: ReturnType<typeof createApp>;
let clock: FakeClock;
let organizationId: string;
let keyId: string;
let auth: { authorization: string };

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  ({ one: served, two: operator, clock, organizationId } = stores);
  const config = loadConfig({ LOG_LEVEL: "silent" });
  app = createApp(createServices({ config, store: served, clock, logger: createLogger({ level: "silent" }) }));
  await operator.grantCredits({ organizationId, source: "grant", type: "grant", amount: 1, expiresAt: null, description: "one", now: clock.now() });
  await operator.ensureSystemUser(clock.now());
  const created = await createApiKey(operator, { organizationId, name: "k", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  keyId = created.key.id;
  auth = { authorization: `Bearer ${created.clearKey}` };
  await operator.applyFeedRecords([{ product: { gtin: GTIN, title: "Pen" } }], clock.now());
});

afterEach(async () => {
  await stores.close();
});

const price = () => app.handle(new Request(`http://localhost/api/v1/products/${GTIN}/price`, { headers: auth }));
const offer = (priceAmount: number) => ({
  product: { gtin: GTIN },
  offer: {
    merchantId: "m",
    priceAmount,
    currency: "EUR",
    shippingAmount: null,
    availability: "in_stock" as const,
    condition: "new" as const,
    url: null,
    observedAt: clock.now(),
  },
});

describe("what the stores keep in memory for the data endpoint", () => {
  test("a key revoked by another connection is refused on the next request", async () => {
    expect((await price()).status).toBe(200);
    await operator.revokeApiKey(organizationId, keyId);
    await changesHeard(served);
    expect((await price()).status).toBe(401);
  });

  test("a key revoked through the serving connection is refused on the next request", async () => {
    expect((await price()).status).toBe(200);
    await served.revokeApiKey(organizationId, keyId);
    expect((await price()).status).toBe(401);
  });

  test("offers imported by another connection are served on the next request", async () => {
    expect((await (await price()).json()).meta.reason).toBe("no-data");
    await operator.applyFeedRecords([offer(1299)], clock.now());
    await changesHeard(served);
    const body = await (await price()).json();
    expect(body.meta.reason).toBe("fresh-offer");
    expect(body.data.offers[0].price.amount).toBe(1299);
  });

  test("a new price imported by another connection is served on the next request, and billed", async () => {
    await operator.grantCredits({ organizationId, source: "grant", type: "grant", amount: 5, expiresAt: null, description: "five", now: clock.now() });
    await operator.applyFeedRecords([offer(1299)], clock.now());
    for (let index = 0; index < 2; index++) expect((await (await price()).json()).data.offers[0].price.amount).toBe(1299);
    await operator.applyFeedRecords([offer(1099)], clock.now());
    await changesHeard(served);
    const body = await (await price()).json();
    expect(body.meta.reason).toBe("fresh-offer");
    expect(body.data.offers[0].price.amount).toBe(1099);
    expect(body.meta.creditsRemaining).toBe(3);
  });

  test("credits granted by another connection are spendable on the next request, and spent ones are gone", async () => {
    await operator.applyFeedRecords([offer(500)], clock.now());
    expect((await price()).status).toBe(200);
    expect((await price()).status).toBe(402);
    await operator.grantCredits({ organizationId, source: "grant", type: "grant", amount: 2, expiresAt: null, description: "two", now: clock.now() });
    expect((await price()).status).toBe(200);
    expect((await (await price()).json()).meta.creditsRemaining).toBe(0);
    expect((await price()).status).toBe(402);
    const balance = await operator.getBalance(organizationId, clock.now());
    expect(balance.available).toBe(0);
    expect((await operator.listTransactions(organizationId, { limit: 10, types: ["usage"] })).items).toHaveLength(3);
  });
});
