import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";
import { addProduct, json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, DAY, HOUR, otherOrganization } from "./fixtures";
import { securityTests } from "../support/security";

const FRESH = "04006381333931";
const STALE = "00012345678905";
const UNKNOWN = "00000000000000";
let fx: BillingFixture;

beforeEach(async () => {
  fx = await billingFixture({ credits: 100, env: { CREDIT_COST: "3" } });
  await addProduct(fx.context, FRESH, [{ merchantId: "m", price: 999, ageMs: 0 }]);
  await addProduct(fx.context, STALE, [{ merchantId: "m", price: 999, ageMs: 3 * DAY }]);
});
afterEach(async () => {
  await fx.context.close();
});

function usage(query = "", headers: Record<string, string> = fx.session.headers): Promise<Response> {
  return fx.context.request(`${BILLING}/usage${query}`, { headers });
}

async function lookUp(gtin: string, auth = fx.org.auth): Promise<number> {
  return (await fx.context.request(`/api/v1/products/${gtin}/price`, { headers: auth })).status;
}

async function usageLedgerSum(organizationId = fx.org.organizationId): Promise<number> {
  const page = await fx.context.store.listTransactions(organizationId, { limit: 100, types: ["usage"] });
  return page.items.reduce((sum, row) => sum + row.amount, 0);
}

describe("GET /api/v1/customer/billing/usage", () => {
  test("it counts billed and unbilled requests per reason and the credits consumed, equal to the ledger's usage rows", async () => {
    expect(await lookUp(FRESH)).toBe(200);
    expect(await lookUp(FRESH)).toBe(200);
    expect(await lookUp(STALE)).toBe(200);
    expect(await lookUp(`${UNKNOWN.slice(0, 13)}0`)).toBe(404);
    expect(await lookUp("123")).toBe(400);
    await fx.context.services.usageCounters.flush();

    const response = await usage();
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("application/json");
    const body = await json(response);
    expect(body.granularity).toBe("day");
    expect(body.groupBy).toBe("reason");
    expect(body.from).toBe("2026-10-24T00:00:00.000Z");
    expect(body.to).toBe("2026-11-23T00:00:00.000Z");
    expect(body.periods).toHaveLength(30);
    const today = body.periods.at(-1);
    expect(today).toEqual({
      start: "2026-11-22T00:00:00.000Z",
      end: "2026-11-23T00:00:00.000Z",
      requests: 5,
      billedRequests: 2,
      creditsConsumed: 6,
      reasons: { "fresh-offer": 2, "stale-data": 1, "product-not-found": 1, "invalid-gtin": 1 },
    });
    expect(body.periods[0]).toEqual({
      start: "2026-10-24T00:00:00.000Z",
      end: "2026-10-25T00:00:00.000Z",
      requests: 0,
      billedRequests: 0,
      creditsConsumed: 0,
      reasons: {},
    });
    expect(body.totals).toEqual({ requests: 5, billedRequests: 2, creditsConsumed: 6, reasons: today.reasons });
    expect(body.totals.creditsConsumed).toBe(-(await usageLedgerSum()));
  });

  test("billed requests count at once (in the debit's transaction); unbilled ones once the written-behind counts are flushed", async () => {
    await lookUp(FRESH);
    await lookUp(STALE);
    const before = await json(await usage());
    expect(before.totals).toEqual({ requests: 1, billedRequests: 1, creditsConsumed: 3, reasons: { "fresh-offer": 1 } });
    await fx.context.services.usageCounters.flush();
    const after = await json(await usage());
    expect(after.totals).toEqual({ requests: 2, billedRequests: 1, creditsConsumed: 3, reasons: { "fresh-offer": 1, "stale-data": 1 } });
  });

  test("a request refused for lack of credits counts as unbilled insufficient-credits", async () => {
    const poor = await otherOrganization(fx.context, 0);
    expect(await lookUp(FRESH, poor.org.auth)).toBe(402);
    await fx.context.services.usageCounters.flush();
    const body = await json(await usage("", poor.session.headers));
    expect(body.totals).toEqual({ requests: 1, billedRequests: 0, creditsConsumed: 0, reasons: { "insufficient-credits": 1 } });
  });

  test("an Idempotency-Key replay counts as an unbilled replayed request; the first answer alone is billed", async () => {
    const keyed = { ...fx.org.auth, "idempotency-key": "usage-replay" };
    for (let i = 0; i < 3; i++) expect((await fx.context.request(`/api/v1/products/${FRESH}/price`, { headers: keyed })).status).toBe(200);
    await fx.context.services.usageCounters.flush();
    const body = await json(await usage());
    expect(body.totals).toEqual({ requests: 3, billedRequests: 1, creditsConsumed: 3, reasons: { "fresh-offer": 1, replayed: 2 } });
    expect(body.totals.creditsConsumed).toBe(-(await usageLedgerSum()));
  });

  test("granularity=hour lists every hour of the range, the range widened to whole hours", async () => {
    await lookUp(FRESH);
    fx.context.clock.advance(2 * HOUR);
    await lookUp(FRESH);
    await lookUp(STALE);
    await fx.context.services.usageCounters.flush();
    const body = await json(await usage("?granularity=hour&from=2026-11-22T09:30:00Z&to=2026-11-22T12:10:00Z"));
    expect(body.from).toBe("2026-11-22T09:00:00.000Z");
    expect(body.to).toBe("2026-11-22T13:00:00.000Z");
    expect(
      body.periods.map((p: { start: string; requests: number; creditsConsumed: number }) => [p.start.slice(11, 13), p.requests, p.creditsConsumed]),
    ).toEqual([
      ["09", 0, 0],
      ["10", 1, 3],
      ["11", 0, 0],
      ["12", 2, 3],
    ]);
  });

  test("without from, granularity=hour covers the last 24 hours up to the end of the current hour", async () => {
    const body = await json(await usage("?granularity=hour"));
    expect(body.periods).toHaveLength(24);
    expect(body.to).toBe("2026-11-22T11:00:00.000Z");
    expect(body.from).toBe("2026-11-21T11:00:00.000Z");
  });

  test("groupBy=key splits each period per key and names the keys", async () => {
    const second = await createApiKey(fx.context.store, {
      organizationId: fx.org.organizationId,
      name: "second",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: fx.context.services.config.keyPrefix,
      now: fx.context.clock.now(),
    });
    await lookUp(FRESH);
    await lookUp(FRESH, { authorization: `Bearer ${second.clearKey}` });
    await lookUp(STALE, { authorization: `Bearer ${second.clearKey}` });
    await fx.context.services.usageCounters.flush();
    const body = await json(await usage("?groupBy=key&granularity=hour&from=2026-11-22T10:00:00Z&to=2026-11-22T11:00:00Z"));
    expect(body.groupBy).toBe("key");
    expect(body.periods).toHaveLength(1);
    const keys = new Map(body.periods[0].keys.map((k: { keyId: string }) => [k.keyId, k]));
    expect(keys.get(fx.org.keyId)).toEqual({ keyId: fx.org.keyId, requests: 1, billedRequests: 1, creditsConsumed: 3, reasons: { "fresh-offer": 1 } });
    expect(keys.get(second.key.id)).toEqual({
      keyId: second.key.id,
      requests: 2,
      billedRequests: 1,
      creditsConsumed: 3,
      reasons: { "fresh-offer": 1, "stale-data": 1 },
    });
    expect(body.keys).toContainEqual({ id: second.key.id, name: "second", keyPrefix: second.key.keyPrefix });
    expect(body.keys).toHaveLength(2);
  });

  test("an API key of the organization reads the same usage", async () => {
    await lookUp(FRESH);
    const byKey = await usage("", fx.org.auth);
    expect(byKey.status).toBe(200);
    expect(await json(byKey)).toEqual(await json(await usage()));
  });

  test("another organization's usage is never counted in", async () => {
    const other = await otherOrganization(fx.context, 10);
    await lookUp(FRESH, other.org.auth);
    await lookUp(STALE, other.org.auth);
    await fx.context.services.usageCounters.flush();
    expect((await json(await usage())).totals.requests).toBe(0);
    expect((await json(await usage("", other.session.headers))).totals.requests).toBe(2);
  });

  test("from after to is a 400 invalid-parameter problem, in French when asked", async () => {
    const response = await usage("?from=2026-11-22T00:00:00Z&to=2026-11-01T00:00:00Z", { ...fx.session.headers, "accept-language": "fr" });
    expect(response.status).toBe(400);
    expect(response.headers.get("content-type")).toStartWith("application/problem+json");
    const body = await json(response);
    expect(body.type).toEndWith("/problems/invalid-parameter");
    expect(body.detail).toBe("from doit être antérieur à to.");
  });

  test("a range longer than 31 days hourly is a 400", async () => {
    const response = await usage("?granularity=hour&from=2026-10-01T00:00:00Z&to=2026-11-22T00:00:00Z");
    expect(response.status).toBe(400);
    expect((await json(response)).detail).toBe("The range is too long for granularity=hour: at most 31 days.");
  });

  test("an unknown granularity or groupBy, or a from that is no date, is a 400", async () => {
    for (const query of ["?granularity=week", "?groupBy=gtin", "?from=yesterday"]) {
      const response = await usage(query);
      expect(response.status).toBe(400);
      expect((await json(response)).type).toEndWith("/problems/invalid-parameter");
    }
  });

  securityTests({ method: "GET", path: () => `${BILLING}/usage`, accepts: "sessionOrKey" }, () => fx.context);
});
