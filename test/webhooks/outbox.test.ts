// The outbox: every event is written in the transaction of what caused it, on whichever store the
// suite runs (SQLite, or PostgreSQL with TEST_DATABASE_URL).
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { newId } from "../../src/lib/ids";
import { completeLocalOrder } from "../../src/modules/billing/service";
import { createApiKey, revokeApiKey, rotateApiKey } from "../../src/modules/keys/service";
import {
  addProduct,
  createOrganization,
  createTestContext,
  packOrder,
  queryRows,
  rowReservingKey,
  signIn,
  type TestContext,
  type TestOrganization,
} from "../support/context";

const FRESH = "04006381333931";

let context: TestContext;
let org: TestOrganization;

beforeEach(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 10);
  await addProduct(context, FRESH, [{ merchantId: "m1", price: 1299, ageMs: 60_000 }]);
});

afterEach(async () => {
  await context.close();
});

async function events(organizationId = org.organizationId): Promise<Array<{ id: string; type: string; data: Record<string, any> }>> {
  const rows = await queryRows<{ id: string; type: string; payload: string }>(
    context.store,
    "SELECT id, type, payload FROM webhook_events WHERE organization_id = ? ORDER BY created_at, id",
    [organizationId],
  );
  return rows.map((row) => ({ id: row.id, type: row.type, data: JSON.parse(row.payload) }));
}

async function eventsOfType(type: string) {
  return (await events()).filter((event) => event.type === type);
}

function lookUp(): Promise<Response> {
  return context.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth });
}

describe("events written with their cause", () => {
  test("the organization's first grant and key each wrote theirs", async () => {
    expect((await events()).map((event) => event.type)).toEqual(["credits.granted", "key.created"]);
    const [granted, created] = await events();
    expect(granted!.data).toMatchObject({
      organizationId: org.organizationId,
      amount: 10,
      source: "grant",
      transactionType: "grant",
      balance: 10,
      expiresAt: null,
    });
    expect(created!.data).toEqual({ organizationId: org.organizationId, keyId: org.keyId, name: "test key", keyPrefix: org.clearKey.slice(0, 8) });
  });

  test("rotating and revoking a key write key.rotated and key.revoked, never a secret", async () => {
    const { store, clock } = context;
    const rotated = await rotateApiKey(store, {
      organizationId: org.organizationId,
      id: org.keyId,
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      now: clock.now(),
    });
    await revokeApiKey(store, { organizationId: org.organizationId, id: rotated.key.id, now: clock.now() });
    expect((await eventsOfType("key.rotated")).map((event) => event.data)).toEqual([
      { organizationId: org.organizationId, keyId: org.keyId, replacedBy: rotated.key.id, name: "test key", keyPrefix: rotated.key.keyPrefix },
    ]);
    expect((await eventsOfType("key.revoked")).map((event) => event.data)).toEqual([
      { organizationId: org.organizationId, keyId: rotated.key.id, name: "test key", keyPrefix: rotated.key.keyPrefix },
    ]);
    const stored = JSON.stringify(await events());
    expect(stored).not.toContain(rotated.clearKey);
    expect(stored).not.toContain(org.clearKey);
  });

  test("a completed order writes credits.granted and invoice.created once, however often it is completed", async () => {
    const { store, clock } = context;
    const order = await store.createOrder(packOrder({ id: "ord_outbox", organizationId: org.organizationId, credits: 500, amount: 900, now: clock.now() }));
    const completion = {
      orderId: order.id,
      now: clock.now(),
      event: null,
      grant: { source: "pack" as const, type: "purchase" as const, amount: 500, expiresAt: null, description: "500 credits" },
      payment: { ref: order.id, amount: 900, currency: "EUR" },
      subscription: null,
      invoice: { description: "500 credits", amount: 900, currency: "EUR", periodStart: null, periodEnd: null },
    };
    const first = await store.completeOrder(completion);
    await store.completeOrder(completion);
    expect((await eventsOfType("credits.granted")).map((event) => event.data)).toContainEqual(
      expect.objectContaining({ amount: 500, source: "pack", transactionType: "purchase", balance: 510 }),
    );
    expect((await eventsOfType("credits.granted")).length).toBe(2);
    expect((await eventsOfType("invoice.created")).map((event) => event.data)).toEqual([
      {
        organizationId: org.organizationId,
        invoiceId: first.invoice!.id,
        number: first.invoice!.number,
        status: "paid",
        total: { amount: 900, currency: "EUR" },
      },
    ]);
  });

  test("without a threshold, look-ups down to zero write credits.depleted only", async () => {
    for (let i = 0; i < 10; i++) expect((await lookUp()).status).toBe(200);
    expect((await lookUp()).status).toBe(402);
    expect(await eventsOfType("credits.low")).toEqual([]);
    expect((await eventsOfType("credits.depleted")).map((event) => event.data)).toEqual([{ organizationId: org.organizationId, balance: 0 }]);
  });

  test("concurrent look-ups across the threshold write one credits.low and, at zero, one credits.depleted", async () => {
    await context.store.setLowCreditThreshold(org.organizationId, 5);
    const statuses = (await Promise.all(Array.from({ length: 16 }, () => lookUp()))).map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(10);
    expect(statuses.filter((status) => status === 402)).toHaveLength(6);
    const low = await eventsOfType("credits.low");
    expect(low).toHaveLength(1);
    expect(low[0]!.data).toMatchObject({ organizationId: org.organizationId, threshold: 5 });
    expect(low[0]!.data.balance).toBeLessThan(5);
    expect((await eventsOfType("credits.depleted")).map((event) => event.data)).toEqual([{ organizationId: org.organizationId, balance: 0 }]);
  });

  test("a balance topped up and run down again crosses the threshold again; staying below it writes nothing more", async () => {
    const { store, clock } = context;
    await store.setLowCreditThreshold(org.organizationId, 5);
    for (let i = 0; i < 7; i++) expect((await lookUp()).status).toBe(200);
    expect(await eventsOfType("credits.low")).toHaveLength(1);
    await store.grantCredits({
      organizationId: org.organizationId,
      source: "grant",
      type: "grant",
      amount: 4,
      expiresAt: null,
      description: "top-up",
      now: clock.now(),
    });
    // 3 + 4 = 7: above the threshold again; two look-ups take it to 5 (not below), the third below.
    for (let i = 0; i < 2; i++) expect((await lookUp()).status).toBe(200);
    expect(await eventsOfType("credits.low")).toHaveLength(1);
    expect((await lookUp()).status).toBe(200);
    expect((await eventsOfType("credits.low")).map((event) => event.data.balance)).toEqual([4, 4]);
  });

  test("trial credits of a new organization are a credits.granted event too", async () => {
    const fresh = await createTestContext({ TRIAL_CREDITS: "25" });
    try {
      const session = await signIn(fresh, "trial@example.com");
      const rows = await queryRows<{ type: string; payload: string }>(fresh.store, "SELECT type, payload FROM webhook_events WHERE organization_id = ?", [
        session.organizationId,
      ]);
      expect(rows.map((row) => ({ type: row.type, data: JSON.parse(row.payload) }))).toEqual([
        {
          type: "credits.granted",
          data: expect.objectContaining({ organizationId: session.organizationId, amount: 25, source: "trial", transactionType: "trial", balance: 25 }),
        },
      ]);
    } finally {
      await fresh.close();
    }
  });

  test("credits written off by expiry count as a debit", async () => {
    const { store, clock } = context;
    const other = await store.createOrganization({ name: "Expiring", now: clock.now() });
    await store.setLowCreditThreshold(other.id, 50);
    await store.grantCredits({
      organizationId: other.id,
      source: "grant",
      type: "grant",
      amount: 100,
      expiresAt: clock.now() + 1000,
      description: "short-lived",
      now: clock.now(),
    });
    clock.advance(2000);
    await store.expireBuckets(clock.now());
    expect((await events(other.id)).map((event) => event.type)).toEqual(["credits.granted", "credits.low", "credits.depleted"]);
  });

  test("a refund paid from credits a look-up gives back counts as a debit", async () => {
    const { store, clock } = context;
    const other = await store.createOrganization({ name: "Refunded", now: clock.now() });
    await store.setLowCreditThreshold(other.id, 5);
    const order = await store.createOrder(packOrder({ id: "ord_refunded", organizationId: other.id, credits: 10, amount: 900, now: clock.now() }));
    expect((await completeLocalOrder({ store, clock }, order.id)).applied).toBe(true);
    // A hold the refund cannot take: in memory on SQLite, a reservation row on PostgreSQL.
    const keyId = await rowReservingKey(store, other.id, clock.now());
    const held = await store.reserveCredits({ organizationId: other.id, amount: 3, keyId, requestId: "req_held", now: clock.now() });
    if (!held.ok) throw new Error("expected the reservation to succeed");
    // The free 7 go at once (10 → 3: below the threshold); the held 3 go to the refund when the look-up gives them back (3 → 0).
    expect(await store.refundPayment({ event: null, ref: order.id, refundedAmount: 900, description: "Refund", now: clock.now() })).toMatchObject({
      applied: true,
      clawedBack: 7,
    });
    clock.advance(1000);
    expect(await store.releaseReservation(held.reservationId, clock.now())).toBe(true);
    const balanceEvents = (await events(other.id)).filter((event) => event.type.startsWith("credits."));
    expect(balanceEvents.map((event) => [event.type, event.data.balance])).toEqual([
      ["credits.granted", 10],
      ["credits.low", 3],
      ["credits.depleted", 0],
    ]);
  });
});

describe("no event without its cause", () => {
  test("a key insert that fails writes no key.created", async () => {
    const { store, clock } = context;
    const before = await events();
    const duplicate = {
      id: org.keyId,
      organizationId: org.organizationId,
      name: "again",
      keyPrefix: "pps_xxxx",
      keyHash: "f".repeat(64),
      createdBy: SYSTEM_USER_ID,
      createdAt: clock.now(),
    };
    await expect(store.insertApiKey(duplicate)).rejects.toThrow();
    expect(await events()).toEqual(before);
  });

  test("a grant that fails (no such organization) writes no credits.granted", async () => {
    const { store, clock } = context;
    await expect(
      store.grantCredits({ organizationId: "org_missing", source: "grant", type: "grant", amount: 5, expiresAt: null, description: "x", now: clock.now() }),
    ).rejects.toThrow();
    expect(await queryRows(store, "SELECT id FROM webhook_events WHERE organization_id = ?", ["org_missing"])).toEqual([]);
  });
});

describe("deliveries written with the event", () => {
  test("only enabled endpoints subscribed to the type get a delivery", async () => {
    const { store, clock } = context;
    const keys = await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId: org.organizationId,
      url: "https://a.example/hook",
      eventTypes: ["key.created"],
      secret: "whsec_AAAA",
      createdAt: clock.now(),
    });
    const credits = await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId: org.organizationId,
      url: "https://b.example/hook",
      eventTypes: ["credits.granted"],
      secret: "whsec_BBBB",
      createdAt: clock.now(),
    });
    const stranger = await createOrganization(context, 0, "Stranger");
    await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId: stranger.organizationId,
      url: "https://c.example/hook",
      eventTypes: ["key.created"],
      secret: "whsec_CCCC",
      createdAt: clock.now(),
    });
    const created = await createApiKey(store, {
      organizationId: org.organizationId,
      name: "second",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      now: clock.now(),
    });
    const deliveries = await queryRows<{ endpoint_id: string; type: string; state: string; attempts: number }>(
      store,
      "SELECT d.endpoint_id, e.type, d.state, d.attempts FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id WHERE e.organization_id = ?",
      [org.organizationId],
    );
    expect(deliveries).toEqual([{ endpoint_id: keys.id, type: "key.created", state: "pending", attempts: 0 }]);
    expect((await eventsOfType("key.created")).at(-1)!.data.keyId).toBe(created.key.id);
    expect(credits.status).toBe("enabled");
  });
});
