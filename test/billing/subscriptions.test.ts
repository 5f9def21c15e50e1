import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, DAY, otherOrganization, postForm, postJSON } from "./fixtures";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

const iso = (ms: number) => new Date(ms).toISOString();

/** Subscribes through the local checkout and pays in the browser; returns the subscription. */
async function subscribe(planId = "basic-monthly") {
  const response = await postJSON(fx.context, `${BILLING}/checkout/subscription`, { planId }, fx.session.headers);
  const { checkoutUrl } = await json(response);
  expect((await postForm(fx.context, `${new URL(checkoutUrl).pathname}/pay`, fx.session.headers)).status).toBe(303);
  const [subscription] = await fx.context.store.listSubscriptions(fx.org.organizationId);
  return subscription!;
}

async function balance() {
  return json(await fx.context.request(`${BILLING}/balance`, { headers: fx.org.auth }));
}

async function invoiceNumbers(): Promise<string[]> {
  return (await json(await fx.context.request(`${BILLING}/invoices`, { headers: fx.org.auth }))).items.map((i: { number: string }) => i.number);
}

function renew(): Promise<number> {
  return fx.context.services.payments.renewSubscriptions(fx.context.clock.now());
}

describe("local subscriptions", () => {
  test("paying a subscription grants the first period's credits in a subscription bucket that expires at the period's end", async () => {
    const start = fx.context.clock.now();
    const subscription = await subscribe();
    expect(subscription).toMatchObject({
      planId: "basic-monthly",
      status: "active",
      currentPeriodStart: start,
      currentPeriodEnd: Date.parse("2026-12-22T10:00:00.000Z"),
    });
    expect(await balance()).toEqual({
      available: 5000,
      reserved: 0,
      buckets: [expect.objectContaining({ source: "subscription", granted: 5000, remaining: 5000, expiresAt: "2026-12-22T10:00:00.000Z" })],
    });
    const ledger = await json(await fx.context.request(`${BILLING}/transactions`, { headers: fx.org.auth }));
    expect(ledger.items).toEqual([expect.objectContaining({ type: "subscription", amount: 5000, balanceAfter: 5000 })]);
    expect(await invoiceNumbers()).toEqual(["INV-000001"]);
  });

  test("the renewal job grants each new period once, with its invoice, and the previous period's leftovers expire", async () => {
    await subscribe();
    expect(await renew()).toBe(0);
    fx.context.clock.set(Date.parse("2026-12-22T10:00:00.000Z"));
    expect(await renew()).toBe(1);
    expect(await renew()).toBe(0);
    expect(await fx.context.store.expireBuckets(fx.context.clock.now())).toBe(1);
    const after = await balance();
    expect(after.available).toBe(5000);
    expect(after.buckets).toEqual([expect.objectContaining({ source: "subscription", remaining: 5000, expiresAt: "2027-01-22T10:00:00.000Z" })]);
    const ledger = (await json(await fx.context.request(`${BILLING}/transactions`, { headers: fx.org.auth }))).items;
    expect(ledger.map((t: { type: string; amount: number }) => `${t.type}${t.amount}`).sort()).toEqual(["expiry-5000", "subscription5000", "subscription5000"]);
    expect(await invoiceNumbers()).toEqual(["INV-000002", "INV-000001"]);
  });

  test("two renewal jobs racing for the same period grant it once", async () => {
    await subscribe();
    fx.context.clock.set(Date.parse("2026-12-23T00:00:00.000Z"));
    const results = await Promise.all([renew(), renew(), renew()]);
    expect(results.reduce((a, b) => a + b, 0)).toBe(1);
    expect(await invoiceNumbers()).toHaveLength(2);
  });

  test("periods missed while the service was down are skipped: only the current one is granted", async () => {
    await subscribe();
    fx.context.clock.set(Date.parse("2027-03-01T00:00:00.000Z"));
    expect(await renew()).toBe(1);
    const [subscription] = await fx.context.store.listSubscriptions(fx.org.organizationId);
    expect(iso(subscription!.currentPeriodStart)).toBe("2027-02-22T10:00:00.000Z");
    expect(iso(subscription!.currentPeriodEnd)).toBe("2027-03-22T10:00:00.000Z");
    expect((await balance()).buckets).toEqual([expect.objectContaining({ remaining: 5000, expiresAt: "2027-03-22T10:00:00.000Z" })]);
  });

  test("a subscription canceled in the portal renews no more, and keeps the current period's credits until it ends", async () => {
    const subscription = await subscribe();
    const cancel = await postForm(fx.context, `/billing/portal/subscriptions/${subscription.id}/cancel`, fx.session.headers);
    expect(cancel.status).toBe(303);
    expect(cancel.headers.get("location")).toBe("/billing/portal");
    const [canceled] = await fx.context.store.listSubscriptions(fx.org.organizationId);
    expect(canceled).toMatchObject({ status: "canceled", canceledAt: fx.context.clock.now() });
    // Canceling again changes nothing and still lands on the portal.
    expect((await postForm(fx.context, `/billing/portal/subscriptions/${subscription.id}/cancel`, fx.session.headers)).status).toBe(303);
    expect((await balance()).available).toBe(5000);
    fx.context.clock.advance(31 * DAY);
    expect(await renew()).toBe(0);
    expect((await balance()).available).toBe(0);
    expect(await invoiceNumbers()).toEqual(["INV-000001"]);
  });

  test("another organization cannot cancel the subscription: 404, it stays active", async () => {
    const subscription = await subscribe();
    const other = await otherOrganization(fx.context);
    const response = await postForm(fx.context, `/billing/portal/subscriptions/${subscription.id}/cancel`, other.session.headers);
    expect(response.status).toBe(404);
    expect((await fx.context.store.listSubscriptions(fx.org.organizationId))[0]!.status).toBe("active");
  });

  test("canceling needs a same-origin session", async () => {
    const subscription = await subscribe();
    const path = `/billing/portal/subscriptions/${subscription.id}/cancel`;
    expect((await postForm(fx.context, path, {})).status).toBe(401);
    expect((await postForm(fx.context, path, fx.org.auth)).status).toBe(401);
    expect((await postForm(fx.context, path, { cookie: fx.session.cookie, "sec-fetch-site": "cross-site" })).status).toBe(403);
    expect((await fx.context.store.listSubscriptions(fx.org.organizationId))[0]!.status).toBe("active");
  });
});
