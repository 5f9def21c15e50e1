import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { addProduct, createOrganization, createTestContext, json, signIn, type TestContext, type TestOrganization, type TestSession } from "../support/context";

// Every endpoint that takes an id, called by another organization with this organization's id:
// always 404 (never 403, which would confirm the id exists), and nothing changes.
let context: TestContext;
let owner: TestSession;
let stranger: TestSession;
let ownerKey: TestOrganization;
const ids = { key: "", order: "", subscriptionOrder: "", invoice: "", subscription: "" };

const post = (path: string, session: TestSession, body?: unknown) =>
  context.request(path, {
    method: "POST",
    headers: { ...session.headers, ...(body === undefined ? { "content-type": "application/x-www-form-urlencoded" } : { "content-type": "application/json" }) },
    body: body === undefined ? "" : JSON.stringify(body),
  });
const get = (path: string, session: TestSession) => context.request(path, { headers: session.headers });

beforeAll(async () => {
  context = await createTestContext();
  owner = await signIn(context, "owner@a.example");
  stranger = await signIn(context, "stranger@b.example");
  ownerKey = await createOrganization(context, 5, "Key org");

  ids.key = (await json(await post("/api/v1/customer/api-keys", owner, { name: "prod" }))).key.id;
  ids.order = (await json(await post("/api/v1/customer/billing/checkout/pack", owner, { packId: "pack-1k" }))).checkoutId;
  ids.subscriptionOrder = (await json(await post("/api/v1/customer/billing/checkout/subscription", owner, { planId: "basic-monthly" }))).checkoutId;
  expect((await post(`/billing/checkout/${ids.order}/pay`, owner)).status).toBe(303);
  expect((await post(`/billing/checkout/${ids.subscriptionOrder}/pay`, owner)).status).toBe(303);
  ids.invoice = (await json(await get("/api/v1/customer/billing/invoices", owner))).items[0].id;
  ids.subscription = (await context.store.listSubscriptions(owner.organizationId))[0]!.id;
});
afterAll(async () => {
  await context.close();
});

describe("tenant isolation", () => {
  const cases: Array<[string, string, () => string]> = [
    ["POST", "rotate a key", () => `/api/v1/customer/api-keys/${ids.key}/rotate`],
    ["POST", "revoke a key", () => `/api/v1/customer/api-keys/${ids.key}/revoke`],
    ["GET", "see a checkout page", () => `/billing/checkout/${ids.order}`],
    ["POST", "pay a checkout", () => `/billing/checkout/${ids.subscriptionOrder}/pay`],
    ["GET", "see an invoice", () => `/billing/invoices/${ids.invoice}`],
    ["POST", "cancel a subscription", () => `/billing/portal/subscriptions/${ids.subscription}/cancel`],
  ];

  test.each(cases)("%s to %s of another organization answers 404", async (method, _what, path) => {
    const response = method === "GET" ? await get(path(), stranger) : await post(path(), stranger, path().includes("/api/") ? {} : undefined);
    expect(response.status).toBe(404);
  });

  test("after every attempt, the owner's key, subscription and balance are unchanged", async () => {
    const keys = await json(await get("/api/v1/customer/api-keys", owner));
    expect(keys.items.find((k: { id: string }) => k.id === ids.key).status).toBe("ACTIVE");
    const subscriptions = await context.store.listSubscriptions(owner.organizationId);
    expect(subscriptions[0]!.status).toBe("active");
  });

  test("lists of another organization show none of this organization's records", async () => {
    for (const path of ["/api/v1/customer/api-keys", "/api/v1/customer/billing/invoices", "/api/v1/customer/billing/transactions"]) {
      const body = await json(await get(path, stranger));
      expect(JSON.stringify(body)).not.toContain(owner.organizationId);
      for (const id of Object.values(ids)) expect(JSON.stringify(body)).not.toContain(id);
    }
  });

  test("an API key reads only its own organization's billing records", async () => {
    await addProduct(context, "04006381333931", [{ merchantId: "m", price: 100, ageMs: 1000 }]);
    const balance = await json(await context.request("/api/v1/customer/billing/balance", { headers: ownerKey.auth }));
    expect(balance.available).toBe(5);
    const invoices = await json(await context.request("/api/v1/customer/billing/invoices", { headers: ownerKey.auth }));
    expect(JSON.stringify(invoices)).not.toContain(ids.invoice);
  });
});
