import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { addProduct, createOrganization, createTestContext, json, signIn, type TestContext, type TestOrganization, type TestSession } from "../support/context";

const GTIN = "4006381333931";
let context: TestContext;
let org: TestOrganization;
let session: TestSession;
let document: any;
beforeAll(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 10);
  session = await signIn(context, "contract@example.org");
  await addProduct(context, `0${GTIN}`, [{ merchantId: "m-1", price: 1299, ageMs: 60_000 }]);
  document = await json(await context.request("/openapi.json"));
});
afterAll(async () => {
  await context.close();
});

/** The statuses the document lists for an operation. */
function documentedStatuses(path: string, method: string): string[] {
  return Object.keys(document.paths[path][method].responses);
}

describe("the HTTP behaviour a contract tool checks against the document", () => {
  test("an integer query parameter takes decimal digits only, and says which values it takes in words", async () => {
    for (const limit of ["0x10", "1e1", "%20", "0", "101", "abc", "2.0"]) {
      const response = await context.request(`/api/v1/customer/api-keys?limit=${limit}`, { headers: session.headers });
      expect({ limit, status: response.status }).toEqual({ limit, status: 400 });
      expect(await json(response)).toMatchObject({
        type: "http://localhost:8080/problems/invalid-parameter",
        detail: "limit must be a whole number from 1 to 100.",
      });
    }
    const french = await context.request("/api/v1/customer/billing/transactions?limit=1e1&language=fr", { headers: session.headers });
    expect((await json(french)).detail).toBe("limit doit être un nombre entier de 1 à 100.");
    expect((await context.request("/api/v1/customer/api-keys?limit=10", { headers: session.headers })).status).toBe(200);
  });

  test("validation details name the field and what it takes, never the validator's internals", async () => {
    const post = (body: unknown) =>
      context.request("/api/v1/customer/api-keys", {
        method: "POST",
        headers: { ...session.headers, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const empty = await post({ name: "" });
    expect(empty.status).toBe(422);
    expect((await json(empty)).detail).toBe("name must be text of 1 to 100 characters.");
    expect((await json(await post({}))).detail).toBe("name is required.");
    const date = await context.request("/api/v1/customer/billing/transactions?from=yesterday", { headers: session.headers });
    expect((await json(date)).detail).toBe("from must be a date and time such as 2026-11-22T10:00:00Z.");
    const type = await context.request("/api/v1/customer/billing/transactions?type=spent", { headers: session.headers });
    expect((await json(type)).detail).toStartWith("type must be one of: purchase, subscription");
  });

  test("a wrong method on an existing path is 405 method-not-allowed with Allow; an unknown path stays 404", async () => {
    const deleteKeys = await context.request("/api/v1/customer/api-keys", { method: "DELETE", headers: session.headers });
    expect(deleteKeys.status).toBe(405);
    expect(deleteKeys.headers.get("allow")).toBe("GET, POST");
    expect(deleteKeys.headers.get("content-type")).toBe("application/problem+json");
    expect(await json(deleteKeys)).toMatchObject({ type: "http://localhost:8080/problems/method-not-allowed", status: 405, title: "Method Not Allowed" });
    const getRotate = await context.request("/api/v1/customer/api-keys/key_1/rotate");
    expect([getRotate.status, getRotate.headers.get("allow")]).toEqual([405, "POST"]);
    const putHealth = await context.request("/healthz", { method: "PUT" });
    expect([putHealth.status, putHealth.headers.get("allow")]).toEqual([405, "GET, HEAD"]);
    const french = await context.request("/healthz", { method: "PUT", headers: { "accept-language": "fr" } });
    expect((await json(french)).detail).toBe("Cette méthode n'est pas autorisée sur cette ressource ; voir l'en-tête Allow.");
    const unknown = await context.request("/api/v1/nothing-here", { method: "DELETE" });
    expect([unknown.status, unknown.headers.get("allow")]).toEqual([404, null]);
  });

  test("every localized answer says its language in Content-Language: API answers, billing pages and every problem", async () => {
    for (const [path, accept, language] of [
      ["/api/v1/customer/billing/catalog?language=fr", "en", "fr"],
      ["/api/v1/customer/billing/catalog", "de, en;q=0.5", "en"],
      ["/billing/return", "fr-CA, en;q=0.5", "fr"],
      ["/nothing-here", "fr", "fr"],
      [`/api/v1/products/${GTIN}/price`, "fr", "fr"],
    ] as const) {
      const response = await context.request(path, { headers: { "accept-language": accept } });
      expect({ path, language: response.headers.get("content-language") }).toEqual({ path, language });
    }
    expect((await context.request("/healthz")).headers.get("content-language")).toBeNull();
  });

  test("every 401 names its scheme in WWW-Authenticate: Bearer for an API key, Cookie for the session", async () => {
    const price = await context.request(`/api/v1/products/${GTIN}/price`);
    expect([price.status, price.headers.get("www-authenticate")]).toEqual([401, 'Bearer realm="price-service"']);
    for (const path of ["/api/v1/auth/me", "/api/v1/customer/api-keys", "/billing/portal"]) {
      const response = await context.request(path);
      expect({ path, status: response.status, challenge: response.headers.get("www-authenticate") }).toEqual({
        path,
        status: 401,
        challenge: 'Cookie realm="price-service", cookie-name="session"',
      });
    }
    const either = await context.request("/api/v1/customer/billing/balance");
    expect([either.status, either.headers.get("www-authenticate")]).toEqual([
      401,
      'Bearer realm="price-service", Cookie realm="price-service", cookie-name="session"',
    ]);
    const balance = await context.request("/api/v1/customer/billing/balance", { headers: { authorization: "Bearer pps_nope" } });
    expect([balance.status, balance.headers.get("www-authenticate")]).toEqual([401, 'Bearer realm="price-service"']);
  });

  test("a malformed Idempotency-Key on the price endpoint is a 400 with meta and RateLimit-Policy, and bills nothing", async () => {
    const response = await context.request(`/api/v1/products/${GTIN}/price`, { headers: { ...org.auth, "idempotency-key": "two words" } });
    expect(response.status).toBe(400);
    expect(response.headers.get("ratelimit-policy")).toStartWith('"default";q=');
    expect(await json(response)).toMatchObject({
      type: "http://localhost:8080/problems/invalid-parameter",
      detail: "Idempotency-Key must be 1 to 255 visible ASCII characters.",
      meta: { reason: "invalid-parameter", billable: false, creditsConsumed: 0, creditsRemaining: 10 },
    });
  });

  test("a query parameter given twice is a clear 400, never one of its values silently kept", async () => {
    const transactions = await context.request("/api/v1/customer/billing/transactions?type=usage&type=grant", { headers: session.headers });
    expect(transactions.status).toBe(400);
    expect((await json(transactions)).detail).toBe("type must be given once.");
    const price = await context.request(`/api/v1/products/${GTIN}/price?language=en&language=fr`, { headers: { ...org.auth, "accept-language": "en" } });
    expect(price.status).toBe(400);
    expect(await json(price)).toMatchObject({
      detail: "language must be given once.",
      meta: { reason: "invalid-parameter", creditsConsumed: 0, creditsRemaining: 10 },
    });
  });

  test("an id over 100 characters is a 400 the document lists for that operation", async () => {
    const long = "x".repeat(101);
    const cases: Array<[string, string, string, string]> = [
      [`/billing/checkout/${long}`, "GET", "/billing/checkout/{id}", "get"],
      [`/billing/invoices/${long}`, "GET", "/billing/invoices/{id}", "get"],
      [`/billing/checkout/${long}/pay`, "POST", "/billing/checkout/{id}/pay", "post"],
      [`/api/v1/customer/api-keys/${long}/revoke`, "POST", "/api/v1/customer/api-keys/{id}/revoke", "post"],
    ];
    for (const [url, method, path, documented] of cases) {
      const response = await context.request(url, { method, headers: session.headers });
      expect({ url: path, status: response.status }).toEqual({ url: path, status: 400 });
      expect((await json(response)).detail).toBe("id must be text of at most 100 characters.");
      expect(documentedStatuses(path, documented)).toContain("400");
    }
  });
});
