// A signed-in customer over a real port, in development mode: the key lifecycle, balance,
// transactions and invoices, a pack bought through the local checkout's Pay page, a subscription
// completed by the operator's `orders complete`, the portal, and Idempotency-Key replays.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { developmentSignIn, expectProblem, feedLine, jsonOf, postJSON, type Service, startService } from "./harness";

const BILLING = "/api/v1/customer/billing";
const KEYS = "/api/v1/customer/api-keys";
const FRESH_GTIN = "4006381333931";

let service: Service;

beforeAll(async () => {
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: "20" },
    prepare: async (cli) => void (await cli(["import", "-"], { stdin: feedLine(FRESH_GTIN, { merchantId: "m-1", price: "12.99", ageMs: 60_000 }) })),
  });
});

afterAll(async () => {
  await service?.stop();
});

/** A new customer with their own organization (20 trial credits); requests carry their cookie and, as a browser would, the service's origin. */
async function customer(email: string) {
  const { cookie, user } = await developmentSignIn(service, email);
  const headers = { cookie, origin: service.publicURL };
  return {
    user,
    headers,
    get: (path: string) => service.request(path, { headers }),
    post: (path: string, body?: unknown, extra: Record<string, string> = {}) => postJSON(service, path, body, { ...headers, ...extra }),
    patch: (path: string, body: unknown) =>
      service.request(path, { method: "PATCH", headers: { ...headers, "content-type": "application/json" }, body: JSON.stringify(body) }),
  };
}

function price(clearKey: string): Promise<Response> {
  return service.request(`/api/v1/products/${FRESH_GTIN}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
}

async function body<T = any>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect({ status: response.status, text }).toEqual({ status, text: expect.any(String) });
  return JSON.parse(text) as T;
}

describe("API keys", () => {
  test("a customer creates, lists, uses, rotates and revokes a key", async () => {
    const ada = await customer("ada@example.com");
    const created = await ada.post(KEYS, { name: "  production  " });
    expect(created.headers.get("cache-control")).toBe("no-store");
    const { key, clearKey } = await body(created, 201);
    expect(clearKey).toMatch(/^pps_[0-9A-Za-z]{38}$/);
    expect(key).toMatchObject({
      name: "production",
      status: "ACTIVE",
      keyPrefix: clearKey.slice(0, 8),
      lastUsedAt: null,
      replacedBy: null,
      createdBy: { id: ada.user.id, email: "ada@example.com" },
    });

    const listed = await ada.get(KEYS);
    const listText = await listed.text();
    expect(listed.status).toBe(200);
    expect(listText).not.toContain(clearKey);
    expect(JSON.parse(listText)).toEqual({ items: [expect.objectContaining({ id: key.id, status: "ACTIVE" })], nextCursor: null });

    const priced = await body(await price(clearKey), 200);
    expect(priced.meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1, creditsRemaining: 19 });

    const rotated = await body(await ada.post(`${KEYS}/${key.id}/rotate`), 200);
    expect(rotated.key).toMatchObject({ name: "production", status: "ACTIVE" });
    expect(rotated.clearKey).not.toBe(clearKey);
    expect((await expectProblem(service, await price(clearKey), 401, "unauthorized")).detail).toContain("rotated");
    expect((await price(rotated.clearKey)).status).toBe(200);
    const afterRotation = await body(await ada.get(KEYS), 200);
    expect(afterRotation.items.map((item: any) => [item.id, item.status, item.replacedBy])).toEqual([
      [rotated.key.id, "ACTIVE", null],
      [key.id, "ROTATED", rotated.key.id],
    ]);

    const revoked = await body(await ada.post(`${KEYS}/${rotated.key.id}/revoke`), 200);
    expect(revoked).toMatchObject({ id: rotated.key.id, status: "REVOKED" });
    const refused = await price(rotated.clearKey);
    expect(refused.headers.get("www-authenticate")).toStartWith("Bearer");
    expect((await expectProblem(service, refused, 401, "unauthorized")).detail).toBe("The API key is revoked.");
    await expectProblem(service, await ada.post(`${KEYS}/${rotated.key.id}/revoke`), 409, "invalid-key-state");
  });

  test("another organization's key is 404, a nameless key is 422, and a key cannot manage keys", async () => {
    const ada = await customer("ada-2@example.com");
    const grace = await customer("grace-2@example.com");
    const { key, clearKey } = await body(await ada.post(KEYS, { name: "ada's" }), 201);
    await expectProblem(service, await grace.post(`${KEYS}/${key.id}/revoke`), 404, "not-found");
    await expectProblem(service, await grace.post(`${KEYS}/key_unknown/rotate`), 404, "not-found");
    const nameless = await expectProblem(service, await ada.post(KEYS, { name: "   " }), 422, "unprocessable-body");
    expect(nameless.detail).toContain("name");
    await expectProblem(service, await service.request(KEYS, { headers: { authorization: `Bearer ${clearKey}` } }), 401, "unauthorized");
    expect((await body(await ada.get(KEYS), 200)).items).toEqual([expect.objectContaining({ id: key.id, status: "ACTIVE" })]);
  });
});

describe("per-key controls", () => {
  test("a key capped at 3 credits a month bills exactly 3 of 8 concurrent look-ups, then gets 402 while another key works; PATCH lifts the cap", async () => {
    const ada = await customer("ada-capped@example.com");
    const capped = await body(await ada.post(KEYS, { name: "staging", monthlyCreditLimit: 3, rateLimit: 5 }), 201);
    expect(capped.key).toMatchObject({ monthlyCreditLimit: 3, rateLimit: 5, expiresAt: null, creditsSpentThisMonth: 0 });
    const other = await body(await ada.post(KEYS, { name: "production" }), 201);

    const statuses = (await Promise.all(Array.from({ length: 8 }, () => price(capped.clearKey)))).map((response) => response.status);
    expect(statuses.filter((status) => status === 200)).toHaveLength(3);
    // The rest are refused by the cap (402) or, past the key's burst of 2 × 5, by its rate limit (429): never billed.
    expect(statuses.filter((status) => status !== 200 && status !== 402 && status !== 429)).toEqual([]);
    await Bun.sleep(1_100);
    const refused = await price(capped.clearKey);
    expect(refused.headers.get("ratelimit-policy")).toStartWith('"key";q=5;w=1, "organization";q=');
    const problem = await expectProblem(service, refused, 402, "insufficient-credits");
    expect(problem.detail).toContain("monthly credit limit of 3 credits");
    expect((await price(other.clearKey)).status).toBe(200);

    const keys = (await body(await ada.get(KEYS), 200)).items;
    expect(keys.find((key: any) => key.id === capped.key.id)).toMatchObject({ creditsSpentThisMonth: 3, monthlyCreditLimit: 3 });
    const usage = (await body(await ada.get(`${BILLING}/transactions`), 200)).items.filter((row: any) => row.type === "usage");
    expect(usage.filter((row: any) => row.keyId === capped.key.id)).toHaveLength(3);
    expect(await body(await ada.get(`${BILLING}/balance`), 200)).toMatchObject({ available: 16, reserved: 0 });

    const lifted = await body(await ada.patch(`${KEYS}/${capped.key.id}`, { monthlyCreditLimit: null }), 200);
    expect(lifted).toMatchObject({ monthlyCreditLimit: null, creditsSpentThisMonth: 3 });
    expect((await price(capped.clearKey)).status).toBe(200);
    await expectProblem(service, await ada.patch(`${KEYS}/${capped.key.id}`, { expiresAt: "2000-01-01T00:00:00.000Z" }), 422, "unprocessable-body");
  });
});

describe("billing", () => {
  test("balance, transactions and invoices answer the session and the organization's API key alike", async () => {
    const ada = await customer("ada-3@example.com");
    const { clearKey } = await body(await ada.post(KEYS, { name: "reader" }), 201);
    expect((await price(clearKey)).status).toBe(200);
    const byKey = { headers: { authorization: `Bearer ${clearKey}` } };
    for (const path of [`${BILLING}/balance`, `${BILLING}/transactions`, `${BILLING}/invoices`]) {
      const withSession = await body(await ada.get(path), 200);
      expect(await body(await service.request(path, byKey), 200)).toEqual(withSession);
      await expectProblem(service, await service.request(path), 401, "unauthorized");
    }
    expect(await body(await ada.get(`${BILLING}/balance`), 200)).toMatchObject({
      available: 19,
      reserved: 0,
      buckets: [{ source: "trial", granted: 20, remaining: 19 }],
    });
    const transactions = await body(await ada.get(`${BILLING}/transactions`), 200);
    expect(transactions.items.map((row: any) => [row.type, row.amount, row.balanceAfter, row.gtin])).toEqual([
      ["usage", -1, 19, "04006381333931"],
      ["trial", 20, 20, null],
    ]);
    expect(await body(await ada.get(`${BILLING}/invoices`), 200)).toEqual({ items: [], nextCursor: null });
    await expectProblem(service, await ada.get(`${BILLING}/transactions?cursor=nonsense`), 400, "invalid-parameter");
  });

  test("a pack bought through the local checkout's Pay page adds its credits, a purchase row and a paid invoice", async () => {
    const ada = await customer("ada-4@example.com");
    const successUrl = `${service.publicURL}/billing/return?checkout=success`;
    const checkout = await body(await ada.post(`${BILLING}/checkout/pack`, { packId: "pack-1k", successUrl }), 201);
    expect(checkout.checkoutId).toStartWith("ord_");
    expect(checkout.checkoutUrl).toBe(`${service.publicURL}/billing/checkout/${checkout.checkoutId}`);
    const path = new URL(checkout.checkoutUrl).pathname;

    const page = await ada.get(path);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toStartWith("text/html");
    const html = await page.text();
    expect(html).toContain(`<form method="post" action="${path}/pay">`);
    expect(html).toContain("Pay €10.00");

    const paid = await service.request(`${path}/pay`, {
      method: "POST",
      headers: { ...ada.headers, "content-type": "application/x-www-form-urlencoded" },
      body: "",
    });
    expect(paid.status).toBe(303);
    expect(paid.headers.get("location")).toBe(successUrl);

    const balance = await body(await ada.get(`${BILLING}/balance`), 200);
    expect(balance.available).toBe(1020);
    expect(balance.buckets.map((bucket: any) => [bucket.source, bucket.granted, bucket.remaining])).toContainEqual(["pack", 1000, 1000]);
    const transactions = await body(await ada.get(`${BILLING}/transactions?type=purchase`), 200);
    expect(transactions.items.map((row: any) => [row.type, row.amount, row.balanceAfter])).toEqual([["purchase", 1000, 1020]]);
    const invoices = await body(await ada.get(`${BILLING}/invoices`), 200);
    expect(invoices.items).toEqual([expect.objectContaining({ status: "paid", total: { amount: 1000, currency: "EUR", formatted: "€10.00" }, pdfUrl: null })]);
    expect(invoices.items[0].number).toMatch(/^INV-\d{6}$/);
    const invoicePage = await ada.get(new URL(invoices.items[0].hostedUrl).pathname);
    expect(invoicePage.status).toBe(200);
    expect(await invoicePage.text()).toContain(invoices.items[0].number);

    // Paying again grants nothing more.
    expect((await service.request(`${path}/pay`, { method: "POST", headers: ada.headers })).status).toBe(303);
    expect((await body(await ada.get(`${BILLING}/balance`), 200)).available).toBe(1020);
  });

  test("a subscription completed by the operator's `orders complete` grants its period's credits, and the portal cancels it", async () => {
    const ada = await customer("ada-5@example.com");
    const checkout = await body(await ada.post(`${BILLING}/checkout/subscription`, { planId: "basic-monthly" }), 201);
    const listed = jsonOf(await service.cli(["orders", "list", "--org", ada.user.organization.id, "--json"]));
    expect(listed).toEqual([
      expect.objectContaining({ id: checkout.checkoutId, kind: "subscription", itemId: "basic-monthly", status: "pending", provider: "local" }),
    ]);
    const completed = jsonOf(await service.cli(["orders", "complete", checkout.checkoutId, "--json"]));
    expect(completed).toMatchObject({
      granted: true,
      order: { id: checkout.checkoutId, status: "completed" },
      bucket: { source: "subscription", granted: 5000, remaining: 5000 },
    });
    expect(jsonOf(await service.cli(["orders", "complete", checkout.checkoutId, "--json"]))).toMatchObject({ granted: false, bucket: null });

    const balance = await body(await ada.get(`${BILLING}/balance`), 200);
    expect(balance.available).toBe(5020);
    const subscriptionBucket = balance.buckets.find((bucket: any) => bucket.source === "subscription");
    expect(Date.parse(subscriptionBucket.expiresAt)).toBeGreaterThan(Date.now() + 27 * 24 * 3_600_000);
    expect((await body(await ada.get(`${BILLING}/invoices`), 200)).items).toHaveLength(1);

    const returnUrl = `${service.publicURL}/billing/return`;
    const portal = await body(await ada.post(`${BILLING}/portal`, { returnUrl }), 200);
    expect(portal.url).toBe(`${service.publicURL}/billing/portal?return=${encodeURIComponent(returnUrl)}`);
    const portalURL = new URL(portal.url);
    const page = await ada.get(`${portalURL.pathname}${portalURL.search}`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).toContain('<span class="status active">active</span>');
    const cancel = /<form method="post" action="(\/billing\/portal\/subscriptions\/[^"/]+\/cancel)[^"]*">/.exec(html)?.[1];
    expect(cancel).toBeString();
    const canceled = await service.request(`${cancel}${portalURL.search}`, { method: "POST", headers: ada.headers });
    expect(canceled.status).toBe(303);
    expect(canceled.headers.get("location")).toBe(`${portalURL.pathname}${portalURL.search}`);
    const after = await (await ada.get(`${portalURL.pathname}${portalURL.search}`)).text();
    expect(after).toContain('<span class="status canceled">canceled</span>');
    expect(after).not.toContain(cancel!);
    // Cancelling keeps the current period's credits.
    expect((await body(await ada.get(`${BILLING}/balance`), 200)).available).toBe(5020);
    await expectProblem(service, await ada.post(`${BILLING}/checkout/pack`, { packId: "pack-unknown" }), 400, "invalid-body");
  });
});

describe("Idempotency-Key", () => {
  test("the same key and body replays the first answer, another body with it is 422, and nothing is created twice", async () => {
    const ada = await customer("ada-6@example.com");
    const idempotency = { "idempotency-key": crypto.randomUUID() };
    const first = await ada.post(`${BILLING}/checkout/pack`, { packId: "pack-10k" }, idempotency);
    const firstBody = await body(first, 201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await ada.post(`${BILLING}/checkout/pack`, { packId: "pack-10k" }, idempotency);
    expect(await body(again, 201)).toEqual(firstBody);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    await expectProblem(service, await ada.post(`${BILLING}/checkout/pack`, { packId: "pack-1k" }, idempotency), 422, "unprocessable-body");
    expect(jsonOf(await service.cli(["orders", "list", "--org", ada.user.organization.id, "--json"]))).toHaveLength(1);

    const keyRequest = { "idempotency-key": crypto.randomUUID() };
    const createdKey = await body(await ada.post(KEYS, { name: "once" }, keyRequest), 201);
    const replayedKey = await ada.post(KEYS, { name: "once" }, keyRequest);
    expect(replayedKey.headers.get("idempotent-replayed")).toBe("true");
    expect(await body(replayedKey, 201)).toEqual(createdKey);
    expect((await body(await ada.get(KEYS), 200)).items).toHaveLength(1);
  });
});
