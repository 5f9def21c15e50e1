import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addProduct, json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, DAY, HOUR, otherOrganization } from "./fixtures";
import { securityTests } from "../support/security";

const GTIN = "04006381333931";
let fx: BillingFixture;

beforeEach(async () => {
  fx = await billingFixture();
  await addProduct(fx.context, GTIN, [{ merchantId: "m", price: 999, ageMs: HOUR }]);
});
afterEach(async () => {
  await fx.context.close();
});

function balance(headers: Record<string, string> = fx.session.headers): Promise<Response> {
  return fx.context.request(`${BILLING}/balance`, { headers });
}

async function grant(amount: number, expiresInMs: number | null, source: "grant" | "pack" | "subscription" | "trial" = "grant") {
  const now = fx.context.clock.now();
  return fx.context.store.grantCredits({
    organizationId: fx.org.organizationId,
    source,
    type: source === "pack" ? "purchase" : source,
    amount,
    expiresAt: expiresInMs === null ? null : now + expiresInMs,
    description: "test",
    now,
  });
}

async function lookUp(times: number): Promise<void> {
  for (let i = 0; i < times; i++) {
    const response = await fx.context.request(`/api/v1/products/${GTIN}/price`, { headers: fx.org.auth });
    expect(response.status).toBe(200);
  }
}

describe("GET /api/v1/customer/billing/balance", () => {
  test("with a session it answers available, reserved and the buckets with their fields", async () => {
    const pack = await grant(100, null, "pack");
    const response = await balance();
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({
      available: 100,
      reserved: 0,
      buckets: [{ id: pack.id, source: "pack", granted: 100, remaining: 100, expiresAt: null, createdAt: "2026-11-22T10:00:00.000Z" }],
    });
  });

  test("with an API key of the organization it answers the same balance", async () => {
    await grant(7, DAY, "trial");
    const bySession = await json(await balance());
    const byKey = await balance(fx.org.auth);
    expect(byKey.status).toBe(200);
    expect(await json(byKey)).toEqual(bySession);
  });

  test("an organization without credits has a zero balance and no bucket", async () => {
    expect(await json(await balance())).toEqual({ available: 0, reserved: 0, buckets: [] });
  });

  test("credits are spent soonest-expiring first and buckets are listed in that order, never-expiring last", async () => {
    const forever = await grant(5, null);
    const later = await grant(3, 2 * DAY, "pack");
    const sooner = await grant(2, DAY, "subscription");
    await lookUp(4);
    const body = await json(await balance(fx.org.auth));
    expect(body.available).toBe(6);
    expect(body.buckets.map((b: { id: string; remaining: number }) => [b.id, b.remaining])).toEqual([
      [later.id, 1],
      [forever.id, 5],
    ]);
    expect(body.buckets.map((b: { id: string }) => b.id)).not.toContain(sooner.id);
  });

  test("expired credits are never counted as available, even before the expiry job runs", async () => {
    await grant(1, null);
    await grant(10, HOUR);
    fx.context.clock.advance(HOUR);
    // The data endpoint sees it first: it may spend the one live credit and no more.
    const first = await fx.context.request(`/api/v1/products/${GTIN}/price`, { headers: fx.org.auth });
    expect((await json(first)).meta.creditsRemaining).toBe(0);
    const second = await fx.context.request(`/api/v1/products/${GTIN}/price`, { headers: fx.org.auth });
    expect(second.status).toBe(402);
    expect(await json(await balance())).toMatchObject({ available: 0, reserved: 0, buckets: [] });
  });

  test("reading the balance writes nothing: expired credits are left out of it until the expiry job writes them off, once", async () => {
    const bucket = await grant(10, HOUR);
    fx.context.clock.advance(HOUR + 1);
    expect(await json(await balance())).toMatchObject({ available: 0, reserved: 0, buckets: [] });
    const transactions = () => fx.context.request(`${BILLING}/transactions?type=expiry`, { headers: fx.session.headers });
    expect((await json(await transactions())).items).toHaveLength(0);
    expect(await fx.context.store.expireBuckets(fx.context.clock.now())).toBe(1);
    const expiry = await json(await transactions());
    expect(expiry.items).toHaveLength(1);
    expect(expiry.items[0]).toMatchObject({ type: "expiry", amount: -10, balanceAfter: 0, bucketId: bucket.id });
    expect(await fx.context.store.expireBuckets(fx.context.clock.now())).toBe(0);
  });

  test("the periodic expiry job writes off every expired bucket of every organization", async () => {
    await grant(4, HOUR);
    const other = await otherOrganization(fx.context);
    await fx.context.store.grantCredits({
      organizationId: other.org.organizationId,
      source: "grant",
      type: "grant",
      amount: 6,
      expiresAt: fx.context.clock.now() + HOUR,
      description: "t",
      now: fx.context.clock.now(),
    });
    fx.context.clock.advance(2 * HOUR);
    expect(await fx.context.store.expireBuckets(fx.context.clock.now())).toBe(2);
    const mine = await json(await fx.context.request(`${BILLING}/transactions?type=expiry`, { headers: fx.org.auth }));
    expect(mine.items.map((t: { amount: number }) => t.amount)).toEqual([-4]);
  });

  test("reserved credits of a request in flight are reported apart from available ones", async () => {
    await grant(10, null);
    const reservation = await fx.context.store.reserveCredits({
      organizationId: fx.org.organizationId,
      amount: 3,
      keyId: null,
      requestId: "req_inflight",
      now: fx.context.clock.now(),
    });
    expect(reservation.ok).toBe(true);
    expect(await json(await balance())).toMatchObject({ available: 7, reserved: 3 });
  });

  test("another organization's session and key see their own balance, never this one's", async () => {
    await grant(50, null);
    const other = await otherOrganization(fx.context, 3);
    for (const headers of [other.session.headers, other.org.auth]) {
      const body = await json(await balance(headers));
      expect(body.available).toBe(3);
      expect(body.buckets).toHaveLength(1);
    }
  });

  securityTests({ method: "GET", path: () => `${BILLING}/balance`, accepts: "sessionOrKey" }, () => fx.context);
});
