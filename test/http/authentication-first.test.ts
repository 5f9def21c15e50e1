import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createOrganization, createTestContext, json, signIn, type TestContext, type TestOrganization } from "../support/context";

// A caller without a credential learns nothing from a secured route but 401, whatever else is wrong
// with the request; with one, the same request gets the problem of what is wrong.
describe("authentication comes before every check of the request", () => {
  let context: TestContext;
  let organization: TestOrganization;

  beforeAll(async () => {
    context = await createTestContext();
    organization = await createOrganization(context, 10);
  });
  afterAll(() => context.close());

  const cases: Array<{ name: string; path: string; init: RequestInit; then: { status: number; slug: string } }> = [
    {
      name: "a limit that is not a number",
      path: "/api/v1/customer/billing/transactions?limit=abc",
      init: {},
      then: { status: 400, slug: "invalid-parameter" },
    },
    {
      name: "a repeated query parameter",
      path: "/api/v1/customer/billing/invoices?limit=5&limit=6",
      init: {},
      then: { status: 400, slug: "invalid-parameter" },
    },
    {
      name: "a body that is not JSON",
      path: "/api/v1/products/prices",
      init: { method: "POST", headers: { "content-type": "application/json" }, body: "{" },
      then: { status: 400, slug: "invalid-body" },
    },
    {
      name: "a body of another media type",
      path: "/api/v1/products/prices",
      init: { method: "POST", headers: { "content-type": "text/plain" }, body: "4006381333931" },
      then: { status: 415, slug: "unsupported-media-type" },
    },
  ];

  for (const { name, path, init, then } of cases) {
    test(`${name}: 401 without a key, ${then.status} with one`, async () => {
      const stranger = await context.request(path, init);
      expect(stranger.status).toBe(401);
      expect((await json(stranger)).type).toEndWith("/unauthorized");
      const headers = { ...(init.headers as Record<string, string> | undefined), ...organization.auth };
      const known = await context.request(path, { ...init, headers });
      expect(known.status).toBe(then.status);
      expect((await json(known)).type).toEndWith(`/${then.slug}`);
    });
  }

  test("a feed run listing with a bad limit: 401 without a feed token", async () => {
    const response = await context.request("/api/v1/feeds/sources/anything/runs?limit=abc");
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
  });

  test("a session route with a body that is not JSON: 401 without a session", async () => {
    const response = await context.request("/api/v1/customer/api-keys", { method: "POST", headers: { "content-type": "application/json" }, body: "{" });
    expect(response.status).toBe(401);
  });
});

describe("text with a NUL character (U+0000)", () => {
  test("in an id is bad input or an unknown id on either store, never a 500", async () => {
    const context = await createTestContext();
    const session = await signIn(context, "nul@example.com");
    for (const path of ["/api/v1/customer/webhooks/%00", "/api/v1/customer/webhooks/a%00b/deliveries"]) {
      const response = await context.request(path, { headers: session.headers });
      expect([400, 404]).toContain(response.status);
      expect((await json(response)).type).toMatch(/\/(invalid-parameter|not-found)$/);
    }
    await context.close();
  });
});
