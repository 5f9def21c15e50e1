import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { startServer } from "../../src/server";
import { addProduct, createOrganization, createTestContext, json, ledgerSum, queryRows, type TestContext, type TestOrganization } from "../support/context";

const FRESH = "04006381333931";
const PRICE = "/api/v1/products/4006381333931/price";

let context: TestContext;
let org: TestOrganization;

beforeEach(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 10);
  await addProduct(context, FRESH, [{ merchantId: "m-a", price: 1299, ageMs: 60_000 }]);
});

afterEach(async () => {
  await context.close();
});

async function available(): Promise<number> {
  return (await context.store.getBalance(org.organizationId, context.clock.now())).available;
}

describe("HEAD on the API", () => {
  test("HEAD on the data endpoint is refused with 405 and Allow: GET, and bills nothing", async () => {
    const response = await context.request(PRICE, { method: "HEAD", headers: org.auth });
    expect(response.status).toBe(405);
    expect(response.headers.get("allow")).toBe("GET");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(await available()).toBe(10);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(10);
  });

  test("HEAD with an Idempotency-Key records no answer: a GET with the same key afterwards is billed and not a replay", async () => {
    const headers = { ...org.auth, "idempotency-key": "head-then-get" };
    expect((await context.request(PRICE, { method: "HEAD", headers })).status).toBe(405);
    expect(await queryRows(context.store, "SELECT key_hash FROM idempotency_records")).toHaveLength(0);
    const response = await context.request(PRICE, { headers });
    expect(response.status).toBe(200);
    expect(response.headers.get("idempotent-replayed")).toBeNull();
    expect((await json(response)).meta.creditsConsumed).toBe(1);
    expect(await available()).toBe(9);
  });

  test("HEAD on other API routes is 405 naming the path's methods, and an unknown API path stays 404", async () => {
    const keys = await context.request("/api/v1/customer/api-keys", { method: "HEAD", headers: org.auth });
    expect(keys.status).toBe(405);
    expect(keys.headers.get("allow")).toBe("GET, POST");
    const callback = await context.request("/api/v1/auth/oidc/callback?code=x&state=y", { method: "HEAD" });
    expect(callback.status).toBe(405);
    expect(callback.headers.get("allow")).toBe("GET");
    expect((await context.request("/api/v1/nothing-here", { method: "HEAD" })).status).toBe(404);
  });

  test("over a real port too, HEAD on the data endpoint is 405 and bills nothing, while HEAD /healthz still answers 200", async () => {
    const server = await startServer(context.services, { port: 0, hostname: "127.0.0.1" });
    try {
      const price = await fetch(server.url + PRICE, { method: "HEAD", headers: org.auth });
      expect(price.status).toBe(405);
      expect(price.headers.get("allow")).toBe("GET");
      expect((await fetch(`${server.url}/healthz`, { method: "HEAD" })).status).toBe(200);
      expect(await available()).toBe(10);
    } finally {
      await server.stop();
    }
  });
});
