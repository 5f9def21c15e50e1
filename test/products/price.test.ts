import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addProduct, createOrganization, createTestContext, json, ledgerSum, type TestContext, type TestOrganization } from "../support/context";
import { securityTests } from "../support/security";

const FRESH = "04006381333931"; // GTIN-13 4006381333931 as GTIN-14
const STALE = "00036000291452"; // GTIN-12 036000291452
const EMPTY = "05901234123457"; // GTIN-13 5901234123457, no offers
const UNKNOWN = "96385074"; // valid GTIN-8, no product
const HOUR = 3_600_000;

let context: TestContext;
let org: TestOrganization;

beforeEach(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 10);
  await addProduct(context, FRESH, [
    { merchantId: "m-b", price: 1499, ageMs: HOUR },
    { merchantId: "m-a", price: 1299, ageMs: 2 * HOUR },
    { merchantId: "m-old", price: 999, ageMs: 48 * HOUR },
  ]);
  await addProduct(context, STALE, [{ merchantId: "m-a", price: 500, ageMs: 25 * HOUR }]);
  await addProduct(context, EMPTY, []);
});

afterEach(async () => {
  await context.close();
});

function price(gtin: string, init: { headers?: Record<string, string>; query?: string } = {}) {
  return context.request(`/api/v1/products/${gtin}/price${init.query ?? ""}`, { headers: init.headers ?? org.auth });
}

async function available(): Promise<number> {
  return (await context.store.getBalance(org.organizationId, context.clock.now())).available;
}

describe("GET /api/v1/products/{gtin}/price", () => {
  securityTests({ method: "GET", path: () => "/api/v1/products/4006381333931/price", accepts: "key" }, () => context);

  describe("when the product has fresh offers", () => {
    test("it answers 200 with the envelope, fresh offers cheapest first, and bills the credit cost", async () => {
      const response = await price("4006381333931");
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toStartWith("application/json");
      const body = await json(response);
      expect(body.meta).toMatchObject({ gtin: FRESH, facet: "product.price", billable: true, creditsConsumed: 1, creditsRemaining: 9, reason: "fresh-offer" });
      expect(body.meta.requestId).toStartWith("req_");
      expect(response.headers.get("x-request-id")).toBe(body.meta.requestId);
      expect(Number.isInteger(body.meta.responseTimeMs)).toBe(true);
      expect(body.data.product).toEqual({ gtin: FRESH, title: `Product ${FRESH}`, brand: "Acme", imageUrl: null });
      expect(body.data.offers.map((o: any) => o.merchant.id)).toEqual(["m-a", "m-b"]);
      expect(body.data.offers[0]).toMatchObject({
        merchant: { id: "m-a", name: "Merchant m-a" },
        price: { amount: 1299, currency: "EUR", formatted: "€12.99" },
        shipping: null,
        availability: "in_stock",
        availabilityLabel: "In stock",
        condition: "new",
        url: null,
      });
      expect(body.data.summary).toEqual({
        offerCount: 2,
        lowestPrice: { amount: 1299, currency: "EUR", formatted: "€12.99" },
        highestPrice: { amount: 1499, currency: "EUR", formatted: "€14.99" },
      });
      expect(body.data.lastObservedAt).toBe(new Date(context.clock.now() - HOUR).toISOString());
      expect(await available()).toBe(9);
      const usage = (await context.store.listTransactions(org.organizationId, { limit: 10, types: ["usage"] })).items;
      expect(usage).toHaveLength(1);
      expect(usage[0]).toMatchObject({ amount: -1, balanceAfter: 9, keyId: org.keyId, requestId: body.meta.requestId, gtin: FRESH });
    });

    test("the GTIN-13 and GTIN-14 forms of one product give the same product and meta.gtin", async () => {
      const short = await json(await price("4006381333931"));
      const long = await json(await price("04006381333931"));
      expect(short.meta.gtin).toBe(FRESH);
      expect(long.meta.gtin).toBe(FRESH);
      expect(long.data).toEqual(short.data);
      expect(await available()).toBe(8);
    });

    test("language=fr localizes money and availability labels", async () => {
      const body = await json(await price(FRESH, { query: "?language=fr" }));
      expect(body.data.offers[0].price.formatted).toBe("12,99 €");
      expect(body.data.offers[0].availabilityLabel).toBe("En stock");
    });

    test("Accept-Language: fr is used when no language parameter is given, and the parameter wins over it", async () => {
      const fromHeader = await json(await price(FRESH, { headers: { ...org.auth, "accept-language": "fr-FR,fr;q=0.9,en;q=0.5" } }));
      expect(fromHeader.data.offers[0].availabilityLabel).toBe("En stock");
      const parameterWins = await json(await price(FRESH, { query: "?language=en", headers: { ...org.auth, "accept-language": "fr" } }));
      expect(parameterWins.data.offers[0].availabilityLabel).toBe("In stock");
    });

    test("it records lastUsedAt behind the request, on the next flush", async () => {
      await price(FRESH);
      expect((await context.store.getApiKeyById(org.keyId))!.lastUsedAt).toBeNull();
      await context.services.keyUsage.flush();
      expect((await context.store.getApiKeyById(org.keyId))!.lastUsedAt).toBe(context.clock.now());
    });
  });

  test("offers age out between two look-ups: each answer holds only the offers fresh at its time, and none fresh is stale-data", async () => {
    const first = await json(await price(FRESH));
    expect(first.data.offers.map((o: any) => o.merchant.id)).toEqual(["m-a", "m-b"]);
    // m-a (2 h old) passes the 24 h window; m-b (1 h old) is still in it.
    context.clock.advance(22 * HOUR + 1000);
    const second = await json(await price(FRESH));
    expect(second.meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1 });
    expect(second.data.offers.map((o: any) => o.merchant.id)).toEqual(["m-b"]);
    context.clock.advance(HOUR);
    const third = await json(await price(FRESH));
    expect(third.meta).toMatchObject({ reason: "stale-data", billable: false, creditsConsumed: 0 });
    expect(third.data.offers).toEqual([]);
    expect(await available()).toBe(8);
  });

  test("offers at one price are ordered by merchant id, shipping is money, and the summary spans the cheapest to the dearest", async () => {
    const TIED = "04012345678901";
    await addProduct(context, TIED, [
      { merchantId: "m-c", price: 700, ageMs: HOUR, shipping: 495 },
      { merchantId: "m-a", price: 700, ageMs: HOUR },
      { merchantId: "m-b", price: 650, ageMs: HOUR },
      { merchantId: "m-d", price: 900, ageMs: HOUR },
    ]);
    const body = await json(await price(TIED));
    expect(body.data.offers.map((o: any) => o.merchant.id)).toEqual(["m-b", "m-a", "m-c", "m-d"]);
    expect(body.data.offers[2].shipping).toEqual({ amount: 495, currency: "EUR", formatted: "€4.95" });
    expect(body.data.offers[1].shipping).toBeNull();
    expect(body.data.summary).toMatchObject({ offerCount: 4, lowestPrice: { amount: 650 }, highestPrice: { amount: 900 } });
  });

  test("an offer exactly as old as the freshness window is fresh, one millisecond older it is stale", async () => {
    const EDGE = "04012345678901";
    await addProduct(context, EDGE, [{ merchantId: "m-a", price: 700, ageMs: 24 * HOUR }]);
    const atTheEdge = await json(await price(EDGE));
    expect(atTheEdge.meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1 });
    context.clock.advance(1);
    const past = await json(await price(EDGE));
    expect(past.meta).toMatchObject({ reason: "stale-data", creditsConsumed: 0 });
    expect(await available()).toBe(9);
  });

  test("a stale answer's lastObservedAt is its newest offer", async () => {
    const OLD = "04012345678901";
    await addProduct(context, OLD, [
      { merchantId: "m-a", price: 700, ageMs: 30 * HOUR },
      { merchantId: "m-b", price: 800, ageMs: 26 * HOUR },
      { merchantId: "m-c", price: 900, ageMs: 40 * HOUR },
    ]);
    const body = await json(await price(OLD));
    expect(body.meta.reason).toBe("stale-data");
    expect(body.data.lastObservedAt).toBe(new Date(context.clock.now() - 26 * HOUR).toISOString());
  });

  test("a clock set back answers from the offers fresh at that time, not from the answer prepared later", async () => {
    const first = await json(await price(FRESH));
    context.clock.advance(23 * HOUR);
    expect((await json(await price(FRESH))).data.offers.map((o: any) => o.merchant.id)).toEqual(["m-b"]);
    context.clock.advance(-23 * HOUR);
    const back = await json(await price(FRESH));
    expect(back.data.offers).toEqual(first.data.offers);
  });

  describe("when there is no usable data", () => {
    test("a product with no offers answers 200 no-data with empty offers and bills nothing", async () => {
      const response = await price(EMPTY);
      expect(response.status).toBe(200);
      const body = await json(response);
      expect(body.meta).toMatchObject({ reason: "no-data", billable: false, creditsConsumed: 0, creditsRemaining: 10, gtin: EMPTY });
      expect(body.data.offers).toEqual([]);
      expect(body.data.summary).toEqual({ offerCount: 0, lowestPrice: null, highestPrice: null });
      expect(body.data.lastObservedAt).toBeNull();
      expect(await available()).toBe(10);
    });

    test("a product whose offers are all older than the freshness window answers 200 stale-data and bills nothing", async () => {
      const response = await price("036000291452");
      expect(response.status).toBe(200);
      const body = await json(response);
      expect(body.meta).toMatchObject({ reason: "stale-data", billable: false, creditsConsumed: 0, creditsRemaining: 10, gtin: STALE });
      expect(body.data.offers).toEqual([]);
      expect(body.data.lastObservedAt).toBe(new Date(context.clock.now() - 25 * HOUR).toISOString());
      expect(await available()).toBe(10);
    });

    test("the freshness window comes from FRESHNESS_WINDOW", async () => {
      const wide = await createTestContext({ FRESHNESS_WINDOW: "48h" });
      const wideOrg = await createOrganization(wide, 5);
      await addProduct(wide, STALE, [{ merchantId: "m-a", price: 500, ageMs: 25 * HOUR }]);
      const body = await json(await wide.request(`/api/v1/products/${STALE}/price`, { headers: wideOrg.auth }));
      expect(body.meta.reason).toBe("fresh-offer");
      await wide.close();
    });

    test("an unknown product answers 404 product-not-found as a problem with meta, and bills nothing", async () => {
      const response = await price(UNKNOWN);
      expect(response.status).toBe(404);
      expect(response.headers.get("content-type")).toBe("application/problem+json");
      const body = await json(response);
      expect(body).toMatchObject({ type: "http://localhost:8080/problems/product-not-found", title: "Product Not Found", status: 404 });
      expect(body.meta).toMatchObject({ reason: "product-not-found", billable: false, creditsConsumed: 0, creditsRemaining: 10, gtin: "00000096385074" });
      expect(response.headers.get("x-request-id")).toBe(body.meta.requestId);
      expect(await available()).toBe(10);
    });
  });

  describe("when the GTIN is invalid", () => {
    test.each([["4006381333932"], ["12345"], ["abcdefgh"], ["400638133393１"]])("%s answers 400 invalid-gtin echoing the raw value", async (raw) => {
      const response = await price(encodeURIComponent(raw));
      expect(response.status).toBe(400);
      expect(response.headers.get("content-type")).toBe("application/problem+json");
      const body = await json(response);
      expect(body.type).toEndWith("/invalid-gtin");
      expect(body.meta).toMatchObject({ reason: "invalid-gtin", billable: false, creditsConsumed: 0, creditsRemaining: 10, gtin: raw });
      expect(await available()).toBe(10);
    });

    test("the problem detail is French with language=fr, the title stays English", async () => {
      const body = await json(await price("123", { query: "?language=fr" }));
      expect(body.title).toBe("Invalid GTIN");
      expect(body.detail).toBe("Le GTIN doit comporter 8, 12, 13 ou 14 chiffres avec une clé de contrôle valide.");
    });
  });

  describe("when credits run out", () => {
    test("it answers 402 insufficient-credits, even for an unknown product, and bills nothing", async () => {
      const poor = await createOrganization(context, 0, "Poor Org");
      for (const gtin of [FRESH, UNKNOWN]) {
        const response = await price(gtin, { headers: poor.auth });
        expect(response.status).toBe(402);
        const body = await json(response);
        expect(body.type).toEndWith("/insufficient-credits");
        expect(body.meta).toMatchObject({ reason: "insufficient-credits", billable: false, creditsConsumed: 0, creditsRemaining: 0 });
      }
      expect((await context.store.listTransactions(poor.organizationId, { limit: 10 })).items).toHaveLength(0);
    });

    test("expired credits are not spendable even before the expiry job runs", async () => {
      const expiring = await createOrganization(context, 0, "Expiring Org");
      await context.store.grantCredits({
        organizationId: expiring.organizationId,
        source: "grant",
        type: "grant",
        amount: 5,
        expiresAt: context.clock.now() + HOUR,
        description: "short",
        now: context.clock.now(),
      });
      expect((await price(FRESH, { headers: expiring.auth })).status).toBe(200);
      context.clock.advance(2 * HOUR);
      const response = await price(FRESH, { headers: expiring.auth });
      expect(response.status).toBe(402);
      expect((await json(response)).meta.creditsRemaining).toBe(0);
      const balance = await context.store.getBalance(expiring.organizationId, context.clock.now());
      expect(balance.available).toBe(0);
      await context.store.expireBuckets(context.clock.now());
      expect(await ledgerSum(context.store, expiring.organizationId)).toBe(balance.available + balance.reserved);
    });

    test("credits are spent from the bucket that expires first, never-expiring buckets last", async () => {
      const fefo = await createOrganization(context, 3, "FEFO Org");
      const soon = await context.store.grantCredits({
        organizationId: fefo.organizationId,
        source: "pack",
        type: "purchase",
        amount: 1,
        expiresAt: context.clock.now() + HOUR,
        description: "soon",
        now: context.clock.now(),
      });
      const later = await context.store.grantCredits({
        organizationId: fefo.organizationId,
        source: "pack",
        type: "purchase",
        amount: 1,
        expiresAt: context.clock.now() + 5 * HOUR,
        description: "later",
        now: context.clock.now(),
      });
      await price(FRESH, { headers: fefo.auth });
      await price(FRESH, { headers: fefo.auth });
      const usage = (await context.store.listTransactions(fefo.organizationId, { limit: 10, types: ["usage"] })).items;
      expect(usage.map((t) => t.bucketId)).toEqual([later.id, soon.id]);
    });
  });

  describe("authentication", () => {
    const cases: Array<[string, () => Record<string, string>, string]> = [
      ["no Authorization header", () => ({}), "required"],
      ["a non-Bearer scheme", () => ({ authorization: `Basic ${btoa("a:b")}` }), "required"],
      ["a malformed key", () => ({ authorization: "Bearer not-a-key" }), "invalid"],
      ["a key with a bad checksum", () => ({ authorization: `Bearer ${org.clearKey.slice(0, -1)}${org.clearKey.endsWith("0") ? "1" : "0"}` }), "invalid"],
      ["a well-formed unknown key", () => ({ authorization: `Bearer ${`pps_${"A".repeat(32)}`}${checksumOf(`pps_${"A".repeat(32)}`)}` }), "invalid"],
    ];
    test.each(cases)("with %s it answers 401 with WWW-Authenticate and bills nothing", async (_name, headers, word) => {
      const response = await price(FRESH, { headers: headers() });
      expect(response.status).toBe(401);
      expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
      expect(response.headers.get("content-type")).toBe("application/problem+json");
      const body = await json(response);
      expect(body).toMatchObject({ type: "http://localhost:8080/problems/unauthorized", title: "Unauthorized", status: 401 });
      expect(body.detail).toContain(word);
      expect(await available()).toBe(10);
    });

    test("a revoked key answers 401 and the detail says it is revoked", async () => {
      await context.store.revokeApiKey(org.organizationId, org.keyId);
      const response = await price(FRESH);
      expect(response.status).toBe(401);
      expect((await json(response)).detail).toContain("revoked");
    });

    test("authentication is checked before the language and the GTIN", async () => {
      const response = await price("bad", { headers: {}, query: "?language=de" });
      expect(response.status).toBe(401);
    });
  });

  describe("the language parameter", () => {
    test("a language other than en or fr answers 400 invalid-parameter and bills nothing", async () => {
      const response = await price(FRESH, { query: "?language=de" });
      expect(response.status).toBe(400);
      const body = await json(response);
      expect(body.type).toEndWith("/invalid-parameter");
      expect(body.meta.reason).toBe("invalid-parameter");
      expect(await available()).toBe(10);
    });

    test("it is validated before the GTIN", async () => {
      const body = await json(await price("123", { query: "?language=xx" }));
      expect(body.type).toEndWith("/invalid-parameter");
    });
  });

  describe("under concurrency", () => {
    test("with a balance of N and many more concurrent billable requests, exactly N are billed and the balance ends at 0", async () => {
      const n = 25;
      const busy = await createOrganization(context, n, "Busy Org");
      const responses = await Promise.all(Array.from({ length: 120 }, () => price(FRESH, { headers: busy.auth })));
      const statuses = responses.map((r) => r.status);
      expect(statuses.filter((s) => s === 200)).toHaveLength(n);
      expect(statuses.filter((s) => s === 402)).toHaveLength(120 - n);
      const balance = await context.store.getBalance(busy.organizationId, context.clock.now());
      expect(balance).toMatchObject({ available: 0, reserved: 0 });
      expect(balance.buckets.every((b) => b.remaining >= 0)).toBe(true);
      expect(await ledgerSum(context.store, busy.organizationId)).toBe(0);
      const usage = (await context.store.listTransactions(busy.organizationId, { limit: 100, types: ["usage"] })).items;
      expect(usage).toHaveLength(n);
      expect(new Set(usage.map((t) => t.requestId)).size).toBe(n);
    });
  });
});

function checksumOf(text: string): string {
  const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  let crc = Bun.hash.crc32(text);
  let out = "";
  while (crc > 0) {
    out = alphabet[crc % 62] + out;
    crc = Math.floor(crc / 62);
  }
  return out.padStart(6, "0");
}

describe("rate limiting", () => {
  test("every answer carries RateLimit-Policy, admitted ones RateLimit, and the key is refused with 429 past its burst, unbilled", async () => {
    const limited = await createTestContext({ RATE_LIMIT: "2/s" });
    const client = await createOrganization(limited, 100);
    await addProduct(limited, FRESH, [{ merchantId: "m", price: 100, ageMs: 1000 }]);
    const call = () => limited.request(`/api/v1/products/${FRESH}/price`, { headers: client.auth });
    const first = await call();
    expect(first.headers.get("ratelimit-policy")).toBe('"default";q=2;w=1, "organization";q=10;w=1');
    // r never above q, though the bucket still holds 3 (a burst of twice the quota).
    expect(first.headers.get("ratelimit")).toBe('"default";r=2;t=0');
    for (let i = 0; i < 3; i++) expect((await call()).status).toBe(200);
    const refused = await call();
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(refused.headers.get("ratelimit")).toBe('"default";r=0;t=1');
    const body = await json(refused);
    expect(body.type).toEndWith("/rate-limited");
    expect(body.meta).toMatchObject({ reason: "rate-limited", billable: false, creditsConsumed: 0, creditsRemaining: 96 });
    limited.clock.advance(500);
    expect((await call()).status).toBe(200);
    const unauthenticated = await limited.request(`/api/v1/products/${FRESH}/price`);
    expect(unauthenticated.headers.get("ratelimit-policy")).toBe('"default";q=2;w=1, "organization";q=10;w=1');
    await limited.close();
  });

  test("each key has its own limit", async () => {
    const limited = await createTestContext({ RATE_LIMIT: "1/s" });
    const a = await createOrganization(limited, 10, "A");
    const b = await createOrganization(limited, 10, "B");
    await addProduct(limited, FRESH, [{ merchantId: "m", price: 100, ageMs: 1000 }]);
    const call = (auth: Record<string, string>) => limited.request(`/api/v1/products/${FRESH}/price`, { headers: auth });
    await call(a.auth);
    await call(a.auth);
    expect((await call(a.auth)).status).toBe(429);
    expect((await call(b.auth)).status).toBe(200);
    await limited.close();
  });
});

describe("Idempotency-Key on the data endpoint", () => {
  const withKey = (key: string, extra: Record<string, string> = {}) => ({ headers: { ...org.auth, "idempotency-key": key, ...extra } });

  test("a retry with the same key gets the stored answer, marked replayed, and is billed once", async () => {
    const first = await price(FRESH, withKey("retry-1"));
    expect(first.status).toBe(200);
    const firstBody = await json(first);
    const second = await price(FRESH, withKey("retry-1"));
    expect(second.status).toBe(200);
    expect(second.headers.get("idempotent-replayed")).toBe("true");
    expect(await json(second)).toEqual(firstBody);
    expect(await available()).toBe(9);
    const usage = (await context.store.listTransactions(org.organizationId, { limit: 10, types: ["usage"] })).items;
    expect(usage).toHaveLength(1);
  });

  test("the GTIN-13 and GTIN-14 forms are the same request for the key", async () => {
    await price("4006381333931", withKey("forms"));
    const replay = await price("04006381333931", withKey("forms"));
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await available()).toBe(9);
  });

  test("the same key for another GTIN or language answers 422 with meta and bills nothing", async () => {
    await price(FRESH, withKey("reuse"));
    const otherGTIN = await price(EMPTY, withKey("reuse"));
    expect(otherGTIN.status).toBe(422);
    expect(otherGTIN.headers.get("content-type")).toBe("application/problem+json");
    expect((await json(otherGTIN)).meta).toMatchObject({ reason: "idempotency-conflict", billable: false });
    expect((await price(FRESH, { ...withKey("reuse"), query: "?language=fr" })).status).toBe(422);
    expect(await available()).toBe(9);
  });

  test("a retry while the first is still in flight answers 409 and is not billed", async () => {
    // The first request is held inside its work (after its claim) until the retry has been answered,
    // so the two overlap on either store, whatever the timing of its round trips.
    const store = context.store;
    const findProductWithOffers = store.findProductWithOffers.bind(store);
    let reached!: () => void;
    const inside = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    store.findProductWithOffers = async (gtin) => {
      reached();
      await gate;
      return findProductWithOffers(gtin);
    };
    const first = price(FRESH, withKey("race"));
    await inside;
    const retry = await price(FRESH, withKey("race"));
    release();
    expect([(await first).status, retry.status]).toEqual([200, 409]);
    expect(await available()).toBe(9);
  });

  test("an error answer is not stored: the same key can be retried once credits arrive", async () => {
    const poor = await createOrganization(context, 0, "Poor");
    const headers = { ...poor.auth, "idempotency-key": "after-topup" };
    expect((await price(FRESH, { headers })).status).toBe(402);
    await context.store.grantCredits({
      organizationId: poor.organizationId,
      source: "grant",
      type: "grant",
      amount: 1,
      expiresAt: null,
      description: "top-up",
      now: context.clock.now(),
    });
    expect((await price(FRESH, { headers })).status).toBe(200);
    const replay = await price(FRESH, { headers });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
  });

  test("keys are scoped to the organization: another organization's same key is a new request", async () => {
    const other = await createOrganization(context, 5, "Other");
    await price(FRESH, withKey("shared-key"));
    const response = await price(FRESH, { headers: { ...other.auth, "idempotency-key": "shared-key" } });
    expect(response.headers.get("idempotent-replayed")).toBeNull();
    expect((await json(response)).meta.creditsRemaining).toBe(4);
  });

  test("the billed answer and its stored replay are written in the debit's transaction", async () => {
    await price(FRESH, withKey("atomic"));
    const usage = (await context.store.listTransactions(org.organizationId, { limit: 10, types: ["usage"] })).items[0]!;
    const replay = await json(await price(FRESH, withKey("atomic")));
    expect(replay.meta.requestId).toBe(usage.requestId);
  });
});
