// Per-key controls: expiresAt, monthlyCreditLimit, rateLimit, at creation and by PATCH.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addProduct, createTestContext, json, ledgerSum, queryRows, signIn, type TestContext, type TestSession } from "../support/context";
import { securityTests } from "../support/security";

const KEYS = "/api/v1/customer/api-keys";
const FRESH = "04006381333931";
const UNKNOWN = "00000000000000"; // well-formed, no such product: reserved, then released
const NOW = Date.parse("2026-11-22T10:00:00.000Z");
const DECEMBER = Date.parse("2026-12-01T00:00:00.000Z");

let context: TestContext;
let ada: TestSession;
let eve: TestSession;

beforeEach(async () => {
  context = await createTestContext({ RATE_LIMIT: "50/s" });
  ada = await signIn(context, "ada@example.com");
  eve = await signIn(context, "eve@example.com");
  await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]);
});

afterEach(async () => {
  await context.close();
});

function send(method: string, path: string, session: TestSession, body?: unknown) {
  return context.request(path, {
    method,
    headers: { ...session.headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function createKey(session: TestSession, body: Record<string, unknown> = {}): Promise<{ key: any; clearKey: string }> {
  const response = await send("POST", KEYS, session, { name: "production", ...body });
  expect(response.status).toBe(201);
  return json(response);
}

function patch(session: TestSession, id: string, body: unknown) {
  return send("PATCH", `${KEYS}/${id}`, session, body);
}

function price(clearKey: string, gtin = FRESH, language?: "en" | "fr") {
  return context.request(`/api/v1/products/${gtin}/price${language ? `?language=${language}` : ""}`, { headers: { authorization: `Bearer ${clearKey}` } });
}

async function grant(session: TestSession, amount: number) {
  await context.store.grantCredits({
    organizationId: session.organizationId,
    source: "grant",
    type: "grant",
    amount,
    expiresAt: null,
    description: "test",
    now: context.clock.now(),
  });
}

async function listed(session: TestSession, id: string): Promise<any> {
  const body = await json(await send("GET", KEYS, session));
  return body.items.find((key: any) => key.id === id);
}

describe("controls at creation", () => {
  test("a key created with controls shows them, and creditsSpentThisMonth starts at 0", async () => {
    const { key } = await createKey(ada, { expiresAt: "2027-01-01T00:00:00Z", monthlyCreditLimit: 500, rateLimit: 10 });
    expect(key).toMatchObject({ expiresAt: "2027-01-01T00:00:00.000Z", monthlyCreditLimit: 500, rateLimit: 10, creditsSpentThisMonth: 0 });
    expect(await listed(ada, key.id)).toMatchObject({
      expiresAt: "2027-01-01T00:00:00.000Z",
      monthlyCreditLimit: 500,
      rateLimit: 10,
      creditsSpentThisMonth: 0,
    });
  });

  test("without controls, each is null", async () => {
    const { key } = await createKey(ada);
    expect(key).toMatchObject({ expiresAt: null, monthlyCreditLimit: null, rateLimit: null, creditsSpentThisMonth: 0 });
  });

  test("an expiry in the past, a negative limit or a rate limit above the service's is 422 unprocessable-body, and creates nothing", async () => {
    for (const body of [
      { expiresAt: new Date(NOW).toISOString() },
      { expiresAt: "2020-01-01T00:00:00.000Z" },
      { expiresAt: "tomorrow" },
      { monthlyCreditLimit: -1 },
      { monthlyCreditLimit: 1.5 },
      { rateLimit: 0 },
      { rateLimit: 51 },
    ]) {
      const response = await send("POST", KEYS, ada, { name: "x", ...body });
      expect(response.status).toBe(422);
      const problem = await json(response);
      expect(problem.type).toEndWith("/unprocessable-body");
      expect(problem.detail).toContain(Object.keys(body)[0]!);
    }
    const french = await context.request(KEYS, {
      method: "POST",
      headers: { ...ada.headers, "content-type": "application/json", "accept-language": "fr" },
      body: JSON.stringify({ name: "x", rateLimit: 51 }),
    });
    expect((await json(french)).detail).toBe("rateLimit vaut au plus 50 requêtes par seconde, la limite du service (ou null pour cette limite).");
    expect((await json(await send("GET", KEYS, ada))).items).toEqual([]);
  });
});

describe("PATCH /api/v1/customer/api-keys/{id}", () => {
  test("it sets the given controls, keeps the absent ones and clears the null ones", async () => {
    const { key } = await createKey(ada, { monthlyCreditLimit: 100 });
    const first = await patch(ada, key.id, { expiresAt: "2027-03-01T12:00:00.000Z", rateLimit: 5 });
    expect(first.status).toBe(200);
    expect(first.headers.get("cache-control")).toBe("no-store");
    expect(await json(first)).toMatchObject({
      id: key.id,
      status: "ACTIVE",
      expiresAt: "2027-03-01T12:00:00.000Z",
      monthlyCreditLimit: 100,
      rateLimit: 5,
      creditsSpentThisMonth: 0,
    });
    const second = await json(await patch(ada, key.id, { monthlyCreditLimit: null, expiresAt: null }));
    expect(second).toMatchObject({ expiresAt: null, monthlyCreditLimit: null, rateLimit: 5 });
    expect(await listed(ada, key.id)).toMatchObject({ expiresAt: null, monthlyCreditLimit: null, rateLimit: 5 });
    expect(await json(await patch(ada, key.id, {}))).toMatchObject({ expiresAt: null, monthlyCreditLimit: null, rateLimit: 5 });
  });

  test("invalid values are 422 and change nothing", async () => {
    const { key } = await createKey(ada, { rateLimit: 3 });
    for (const body of [{ rateLimit: 51 }, { expiresAt: "2000-01-01T00:00:00.000Z" }, { monthlyCreditLimit: "ten" }]) {
      const response = await patch(ada, key.id, body);
      expect(response.status).toBe(422);
      expect((await json(response)).type).toEndWith("/unprocessable-body");
    }
    expect(await listed(ada, key.id)).toMatchObject({ rateLimit: 3, expiresAt: null, monthlyCreditLimit: null });
  });

  test("another organization's key or an unknown id is 404 not-found, and the key is unchanged", async () => {
    const { key } = await createKey(eve);
    for (const id of [key.id, "key_doesnotexist"]) {
      const response = await patch(ada, id, { monthlyCreditLimit: 1 });
      expect(response.status).toBe(404);
      expect((await json(response)).type).toEndWith("/not-found");
    }
    expect((await listed(eve, key.id)).monthlyCreditLimit).toBeNull();
  });

  test("a ROTATED or REVOKED key is 409 invalid-key-state", async () => {
    const rotated = await createKey(ada);
    await send("POST", `${KEYS}/${rotated.key.id}/rotate`, ada);
    const revoked = await createKey(ada);
    await send("POST", `${KEYS}/${revoked.key.id}/revoke`, ada);
    for (const [id, status] of [
      [rotated.key.id, "ROTATED"],
      [revoked.key.id, "REVOKED"],
    ]) {
      const response = await patch(ada, id!, { rateLimit: 1 });
      expect(response.status).toBe(409);
      const body = await json(response);
      expect(body.type).toEndWith("/invalid-key-state");
      expect(body.detail).toBe(`The key is ${status}; only an ACTIVE key's controls can be changed.`);
    }
  });

  test("a cross-site PATCH with a valid cookie is refused and changes nothing", async () => {
    const { key } = await createKey(ada);
    const response = await context.request(`${KEYS}/${key.id}`, {
      method: "PATCH",
      headers: { ...ada.headers, "content-type": "application/json", origin: "https://evil.example" },
      body: JSON.stringify({ monthlyCreditLimit: 0 }),
    });
    expect(response.status).toBe(403);
    expect((await listed(ada, key.id)).monthlyCreditLimit).toBeNull();
  });

  const securityKeyId = "key_doesnotexist";
  securityTests({ method: "PATCH", path: () => `${KEYS}/${securityKeyId}`, body: () => ({ rateLimit: 1 }), accepts: "session" }, () => context);
});

describe("expiresAt", () => {
  test("from expiresAt on, the key gets 401 saying it expired and when, in en and fr; before, it works", async () => {
    await grant(ada, 10);
    const expiresAt = NOW + 60_000;
    const { key, clearKey } = await createKey(ada, { expiresAt: new Date(expiresAt).toISOString() });
    expect((await price(clearKey)).status).toBe(200);
    context.clock.set(expiresAt);
    const refused = await price(clearKey);
    expect(refused.status).toBe(401);
    expect(refused.headers.get("www-authenticate")).toStartWith("Bearer");
    const body = await json(refused);
    expect(body.type).toEndWith("/unauthorized");
    expect(body.detail).toBe("The API key expired at 2026-11-22T10:01:00.000Z.");
    expect(body.meta).toMatchObject({ reason: "unauthorized", billable: false });
    expect((await json(await price(clearKey, FRESH, "fr"))).detail).toBe("La clé d'API a expiré le 2026-11-22T10:01:00.000Z.");
    // The billing endpoints that take an API key refuse it too.
    const balance = await context.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${clearKey}` } });
    expect(balance.status).toBe(401);
    expect((await json(balance)).detail).toContain("expired");
    // Still ACTIVE: a later expiry brings it back.
    expect((await listed(ada, key.id)).status).toBe("ACTIVE");
    expect((await patch(ada, key.id, { expiresAt: new Date(expiresAt + 3_600_000).toISOString() })).status).toBe(200);
    expect((await price(clearKey)).status).toBe(200);
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(8);
  });
});

describe("monthlyCreditLimit", () => {
  test("a key at its limit gets 402 naming the limit and the reset, unbilled; the organization's other keys keep working", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 2 });
    const other = await createKey(ada);
    expect((await price(capped.clearKey)).status).toBe(200);
    expect((await price(capped.clearKey)).status).toBe(200);
    const refused = await price(capped.clearKey);
    expect(refused.status).toBe(402);
    const body = await json(refused);
    expect(body.type).toEndWith("/insufficient-credits");
    expect(body.detail).toBe(
      "This API key reached its monthly credit limit of 2 credits; it resets at 2026-12-01T00:00:00.000Z. The organization's other keys are not affected.",
    );
    expect(body.meta).toMatchObject({ reason: "insufficient-credits", billable: false, creditsConsumed: 0, creditsRemaining: 98 });
    expect((await json(await price(capped.clearKey, FRESH, "fr"))).detail).toBe(
      "Cette clé d'API a atteint sa limite mensuelle de 2 crédits ; elle se renouvelle le 2026-12-01T00:00:00.000Z. Les autres clés de l'organisation ne sont pas concernées.",
    );
    expect((await price(other.clearKey)).status).toBe(200);
    expect(await listed(ada, capped.key.id)).toMatchObject({ monthlyCreditLimit: 2, creditsSpentThisMonth: 2 });
    expect((await listed(ada, other.key.id)).creditsSpentThisMonth).toBe(1);
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(97);
  });

  test("the limit resets on the first of the next month (UTC, by the server clock)", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 1 });
    expect((await price(capped.clearKey)).status).toBe(200);
    context.clock.set(DECEMBER - 1);
    expect((await price(capped.clearKey)).status).toBe(402);
    context.clock.set(DECEMBER);
    ada = await signIn(context, "ada@example.com"); // the first session ran out meanwhile
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]); // and the offer went stale
    expect(await listed(ada, capped.key.id)).toMatchObject({ creditsSpentThisMonth: 0 });
    expect((await price(capped.clearKey)).status).toBe(200);
    expect((await price(capped.clearKey)).status).toBe(402);
    expect(await listed(ada, capped.key.id)).toMatchObject({ creditsSpentThisMonth: 1 });
    const rows = await queryRows<{ month: string; spent: number }>(
      context.store,
      "SELECT month, spent FROM api_key_monthly_usage WHERE key_id = ? ORDER BY month",
      [capped.key.id],
    );
    expect(rows.map((row) => [row.month, Number(row.spent)])).toEqual([
      ["2026-11", 1],
      ["2026-12", 1],
    ]);
  });

  test("unbilled outcomes do not count: a released reservation frees the key's limit", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 1 });
    for (let i = 0; i < 3; i++) expect((await price(capped.clearKey, UNKNOWN)).status).toBe(404);
    expect((await price(capped.clearKey)).status).toBe(200);
    expect((await listed(ada, capped.key.id)).creditsSpentThisMonth).toBe(1);
  });

  test("a partly billed batch holds against the key's limit only what it kept: the rest of the limit stays usable", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 3 });
    const batch = await context.request("/api/v1/products/prices", {
      method: "POST",
      headers: { authorization: `Bearer ${capped.clearKey}`, "content-type": "application/json" },
      body: JSON.stringify({ gtins: [FRESH, UNKNOWN, "00000000000017"] }),
    });
    expect(batch.status).toBe(200);
    expect((await json(batch)).meta.creditsConsumed).toBe(1);
    expect((await price(capped.clearKey)).status).toBe(200);
    expect((await price(capped.clearKey)).status).toBe(200);
    expect((await price(capped.clearKey)).status).toBe(402);
    expect((await listed(ada, capped.key.id)).creditsSpentThisMonth).toBe(3);
  });

  test("a limit lowered below the month's spending caps the key at once; raised or cleared, it works again", async () => {
    await grant(ada, 100);
    const { key, clearKey } = await createKey(ada);
    for (let i = 0; i < 3; i++) expect((await price(clearKey)).status).toBe(200);
    expect((await listed(ada, key.id)).creditsSpentThisMonth).toBe(3);
    await patch(ada, key.id, { monthlyCreditLimit: 2 });
    expect((await price(clearKey)).status).toBe(402);
    await patch(ada, key.id, { monthlyCreditLimit: 4 });
    expect((await price(clearKey)).status).toBe(200);
    expect((await price(clearKey)).status).toBe(402);
    await patch(ada, key.id, { monthlyCreditLimit: null });
    expect((await price(clearKey)).status).toBe(200);
    await patch(ada, key.id, { monthlyCreditLimit: 0 });
    expect((await price(clearKey)).status).toBe(402);
  });

  test("with too few credits in the organization, the balance's 402 comes first", async () => {
    await grant(ada, 1);
    const { clearKey } = await createKey(ada, { monthlyCreditLimit: 10 });
    expect((await price(clearKey)).status).toBe(200);
    const refused = await json(await price(clearKey));
    expect(refused.detail).toBe("Not enough credits to perform this request.");
  });

  test("10 concurrent look-ups against a limit of 3 bill exactly 3, and the ledger and the key's counter agree", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 3 });
    const responses = await Promise.all(Array.from({ length: 10 }, () => price(capped.clearKey)));
    const statuses = responses.map((response) => response.status).sort();
    expect(statuses.filter((status) => status === 200)).toHaveLength(3);
    expect(statuses.filter((status) => status === 402)).toHaveLength(7);
    const usage = (await context.store.listTransactions(ada.organizationId, { limit: 100, types: ["usage"] })).items;
    expect(usage).toHaveLength(3);
    expect(usage.every((row) => row.keyId === capped.key.id)).toBe(true);
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(97);
    expect(await context.store.getBalance(ada.organizationId, context.clock.now())).toMatchObject({ available: 97, reserved: 0 });
    expect((await listed(ada, capped.key.id)).creditsSpentThisMonth).toBe(3);
  });

  test("concurrent look-ups on a capped key beside an uncapped one: the cap holds, the other key is billed in full", async () => {
    await grant(ada, 100);
    const capped = await createKey(ada, { monthlyCreditLimit: 4 });
    const free = await createKey(ada);
    const responses = await Promise.all(Array.from({ length: 24 }, (_, i) => price(i % 2 === 0 ? capped.clearKey : free.clearKey)));
    const okOf = (clearKey: string) =>
      responses.filter((response, i) => (i % 2 === 0 ? capped.clearKey : free.clearKey) === clearKey && response.status === 200).length;
    expect(okOf(capped.clearKey)).toBe(4);
    expect(okOf(free.clearKey)).toBe(12);
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(84);
    expect((await listed(ada, capped.key.id)).creditsSpentThisMonth).toBe(4);
    expect((await listed(ada, free.key.id)).creditsSpentThisMonth).toBe(12);
  });
});

describe("rateLimit", () => {
  test("a key's own rate limit drives the limiter and its RateLimit headers; the service's applies to the others", async () => {
    await grant(ada, 100);
    const slow = await createKey(ada, { rateLimit: 2 });
    const normal = await createKey(ada);
    const first = await price(slow.clearKey);
    expect(first.headers.get("ratelimit-policy")).toBe('"key";q=2;w=1, "organization";q=250;w=1');
    expect(first.headers.get("ratelimit")).toBe('"key";r=2;t=0');
    for (let i = 0; i < 3; i++) expect((await price(slow.clearKey)).status).toBe(200);
    const refused = await price(slow.clearKey);
    expect(refused.status).toBe(429);
    expect(refused.headers.get("ratelimit-policy")).toBe('"key";q=2;w=1, "organization";q=250;w=1');
    expect(refused.headers.get("retry-after")).toBe("1");
    expect((await json(refused)).detail).toBe("Rate limit of 2 requests per 1 s exceeded; retry in 1 s.");
    const other = await price(normal.clearKey);
    expect(other.status).toBe(200);
    expect(other.headers.get("ratelimit-policy")).toBe('"default";q=50;w=1, "organization";q=250;w=1');
    // Cleared, the key is back on the service's quota at once (the tokens it had left carry over).
    await patch(ada, slow.key.id, { rateLimit: null });
    context.clock.advance(500);
    const cleared = await price(slow.clearKey);
    expect(cleared.status).toBe(200);
    expect(cleared.headers.get("ratelimit-policy")).toBe('"default";q=50;w=1, "organization";q=250;w=1');
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(94);
  });
});

describe("rotation", () => {
  test("the new key carries the controls and the month's spending over", async () => {
    await grant(ada, 100);
    const old = await createKey(ada, { expiresAt: "2027-01-01T00:00:00.000Z", monthlyCreditLimit: 3, rateLimit: 7 });
    for (let i = 0; i < 2; i++) expect((await price(old.clearKey)).status).toBe(200);
    const rotated = await json(await send("POST", `${KEYS}/${old.key.id}/rotate`, ada));
    expect(rotated.key).toMatchObject({ expiresAt: "2027-01-01T00:00:00.000Z", monthlyCreditLimit: 3, rateLimit: 7, creditsSpentThisMonth: 2 });
    expect((await price(rotated.clearKey)).status).toBe(200);
    expect((await price(rotated.clearKey)).status).toBe(402);
    expect((await listed(ada, old.key.id)).status).toBe("ROTATED");
  });

  test("a batch of the old key still in flight at the rotation counts against the new key's limit", async () => {
    await grant(ada, 100);
    const old = await createKey(ada, { monthlyCreditLimit: 3 });
    const { store, clock } = context;
    const inFlight = await store.reserveCredits({
      organizationId: ada.organizationId,
      amount: 2,
      keyId: old.key.id,
      requestId: "req_in_flight",
      now: clock.now(),
    });
    if (!inFlight.ok) throw new Error("expected the reservation to succeed");
    const rotated = await json(await send("POST", `${KEYS}/${old.key.id}/rotate`, ada));
    // While the old key's 2 credits are held, the new key may take only 1.
    const held = await store.reserveCredits({
      organizationId: ada.organizationId,
      amount: 2,
      keyId: rotated.key.id,
      requestId: "req_new_held",
      now: clock.now(),
    });
    expect(held).toMatchObject({ ok: false, keyLimit: 3 });
    expect(await store.commitReservation(inFlight.reservationId, { gtin: null, description: "Price look-ups of 2 GTINs", now: clock.now(), items: 2 })).toBe(
      true,
    );
    expect((await listed(ada, rotated.key.id)).creditsSpentThisMonth).toBe(2);
    expect((await price(rotated.clearKey)).status).toBe(200);
    expect((await price(rotated.clearKey)).status).toBe(402);
    expect(await ledgerSum(context.store, ada.organizationId)).toBe(97);
  });

  test("a request of the old key that reserves just after the rotation is held to the new key's spending", async () => {
    await grant(ada, 100);
    const old = await createKey(ada, { monthlyCreditLimit: 3 });
    const rotated = await json(await send("POST", `${KEYS}/${old.key.id}/rotate`, ada));
    for (let i = 0; i < 3; i++) expect((await price(rotated.clearKey)).status).toBe(200);
    const { store, clock } = context;
    const late = await store.reserveCredits({ organizationId: ada.organizationId, amount: 1, keyId: old.key.id, requestId: "req_late", now: clock.now() });
    expect(late).toMatchObject({ ok: false, keyLimit: 3 });
  });
});
