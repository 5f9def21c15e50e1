// The organization-wide rate limit beside each key's own, and a rotation's replacement continuing its
// key's bucket: no number of keys or rotations raises what an organization may send.
import { afterEach, describe, expect, test } from "bun:test";
import { ConfigError, loadConfig } from "../../src/config";
import { addProduct, createTestContext, json, signIn, type TestContext, type TestSession } from "../support/context";

const KEYS = "/api/v1/customer/api-keys";
const FRESH = "04006381333931";

let context: TestContext;
let ada: TestSession;
const opened: TestContext[] = [];

async function start(env: Record<string, string>): Promise<void> {
  context = await createTestContext(env);
  opened.push(context);
  ada = await signIn(context, "ada@example.com");
  await context.store.grantCredits({
    organizationId: ada.organizationId,
    source: "grant",
    type: "grant",
    amount: 1000,
    expiresAt: null,
    description: "test",
    now: context.clock.now(),
  });
  await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]);
}

afterEach(async () => {
  for (const each of opened.splice(0)) await each.close();
});

async function createKey(session: TestSession, body: Record<string, unknown> = {}): Promise<{ key: any; clearKey: string }> {
  const response = await context.request(KEYS, {
    method: "POST",
    headers: { ...session.headers, "content-type": "application/json" },
    body: JSON.stringify({ name: "k", ...body }),
  });
  expect(response.status).toBe(201);
  return json(response);
}

async function rotate(id: string): Promise<{ key: any; clearKey: string }> {
  const response = await context.request(`${KEYS}/${id}/rotate`, { method: "POST", headers: ada.headers });
  expect(response.status).toBe(200);
  return json(response);
}

const price = (clearKey: string) => context.request(`/api/v1/products/${FRESH}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
const batch = (clearKey: string, count: number) =>
  context.request("/api/v1/products/prices", {
    method: "POST",
    headers: { authorization: `Bearer ${clearKey}`, "content-type": "application/json" },
    body: JSON.stringify({ gtins: Array.from({ length: count }, () => FRESH) }),
  });

describe("ORG_RATE_LIMIT", () => {
  test("defaults to five times RATE_LIMIT; a malformed value names the variable", () => {
    expect(loadConfig({ RATE_LIMIT: "40/m" }).organizationRateLimit).toEqual({ limit: 200, windowMs: 60_000 });
    expect(loadConfig({ RATE_LIMIT: "40/m", ORG_RATE_LIMIT: "7/s" }).organizationRateLimit).toEqual({ limit: 7, windowMs: 1000 });
    for (const value of ["fast", "0/s", "10/h"]) {
      let thrown: unknown;
      try {
        loadConfig({ ORG_RATE_LIMIT: value });
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(ConfigError);
      expect((thrown as ConfigError).variable).toBe("ORG_RATE_LIMIT");
    }
  });
});

describe("the organization-wide limit", () => {
  test("five keys together get the organization's burst, not five keys' worth; other organizations are not affected", async () => {
    await start({ RATE_LIMIT: "2/s", ORG_RATE_LIMIT: "3/s" });
    const keys = await Promise.all(Array.from({ length: 5 }, () => createKey(ada)));
    const responses: Response[] = [];
    for (let i = 0; i < 20; i++) responses.push(await price(keys[i % 5]!.clearKey));
    expect(responses.map((response) => response.status)).toEqual([...Array(6).fill(200), ...Array(14).fill(429)]);
    const refused = responses[6]!;
    expect(refused.headers.get("ratelimit-policy")).toBe('"default";q=2;w=1, "organization";q=3;w=1');
    expect(refused.headers.get("ratelimit")).toBe('"organization";r=0;t=1');
    expect(refused.headers.get("retry-after")).toBe("1");
    const problem = await json(refused);
    expect(problem.type).toEndWith("/rate-limited");
    expect(problem.detail).toBe("Rate limit of 3 requests per 1 s for all of the organization's keys together exceeded; retry in 1 s.");
    expect(problem.meta).toMatchObject({ reason: "rate-limited", billable: false, creditsConsumed: 0 });
    // A refusal takes nothing from the key's own bucket: after a second, the organization's 3 are back.
    context.clock.advance(1000);
    const again = [];
    for (let i = 0; i < 4; i++) again.push((await price(keys[0]!.clearKey)).status);
    expect(again).toEqual([200, 200, 200, 429]);
    const eve = await signIn(context, "eve@example.com");
    await context.store.grantCredits({
      organizationId: eve.organizationId,
      source: "grant",
      type: "grant",
      amount: 10,
      expiresAt: null,
      description: "test",
      now: context.clock.now(),
    });
    expect((await price((await createKey(eve)).clearKey)).status).toBe(200);
  });

  test("RateLimit-Policy names both policies, and RateLimit reports the one closest to its limit", async () => {
    await start({ RATE_LIMIT: "50/s", ORG_RATE_LIMIT: "10/s" });
    const slow = await createKey(ada, { rateLimit: 2 });
    const fast = await createKey(ada);
    const first = await price(slow.clearKey);
    expect(first.status).toBe(200);
    expect(first.headers.get("ratelimit-policy")).toBe('"key";q=2;w=1, "organization";q=10;w=1');
    expect(first.headers.get("ratelimit")).toBe('"key";r=2;t=0');
    let last: Response | undefined;
    for (let i = 0; i < 15; i++) last = await price(fast.clearKey);
    expect(last!.status).toBe(200);
    expect(last!.headers.get("ratelimit-policy")).toBe('"default";q=50;w=1, "organization";q=10;w=1');
    expect(last!.headers.get("ratelimit")).toBe('"organization";r=4;t=1');
    const unauthenticated = await context.request(`/api/v1/products/${FRESH}/price`);
    expect(unauthenticated.status).toBe(401);
    expect(unauthenticated.headers.get("ratelimit-policy")).toBe('"default";q=50;w=1, "organization";q=10;w=1');
  });

  test("the batch look-up draws on the same organization bucket, in items", async () => {
    await start({ RATE_LIMIT: "50/s", ORG_RATE_LIMIT: "10/s" });
    const one = await createKey(ada);
    const two = await createKey(ada);
    const big = await batch(one.clearKey, 15);
    expect(big.status).toBe(200);
    expect(big.headers.get("ratelimit-policy")).toBe('"default";q=50;w=1;qu="items", "organization";q=10;w=1;qu="items"');
    expect(big.headers.get("ratelimit")).toBe('"organization";r=5;t=1');
    expect((await price(two.clearKey)).status).toBe(200);
    const refused = await batch(two.clearKey, 6);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit")).toBe('"organization";r=4;t=1');
    expect(refused.headers.get("retry-after")).toBe("1");
    expect((await json(refused)).detail).toBe(
      "Rate limit of 10 GTINs per 1 s for all of the organization's keys together exceeded (this batch has 6); retry in 1 s.",
    );
  });
});

describe("rotation and the per-key bucket", () => {
  test("a replacement continues its key's bucket instead of starting full, through any number of rotations", async () => {
    await start({ RATE_LIMIT: "2/s", ORG_RATE_LIMIT: "100/s" });
    let current = await createKey(ada);
    for (let i = 0; i < 4; i++) expect((await price(current.clearKey)).status).toBe(200);
    expect((await price(current.clearKey)).status).toBe(429);
    for (let rotation = 0; rotation < 3; rotation++) {
      current = await rotate(current.key.id);
      const refused = await price(current.clearKey);
      expect(refused.status).toBe(429);
      expect(refused.headers.get("ratelimit")).toBe('"default";r=0;t=1');
    }
    context.clock.advance(500);
    expect((await price(current.clearKey)).status).toBe(200);
    expect((await price(current.clearKey)).status).toBe(429);
  });
});
