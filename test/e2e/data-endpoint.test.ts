// The data endpoint and the service's own pages over a real port, in production mode, on a
// database set up through the product's CLI: every reason, the errors a client meets, an
// Idempotency-Key replay, /metrics, /docs and /openapi.json.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { spawnServe } from "../support/service-process";
import { expectProblem, feedLine, jsonOf, scrapeEach, type Service, startService, summed } from "./harness";

const FRESH = "4006381333931";
const STALE = "5901234123457";
const NO_DATA = "96385074";
const UNKNOWN = "4012345678901";
const CREDITS = 100;
const RATE_LIMIT_PER_MINUTE = 5; // a bucket of 10: the burst is twice the rate
const BODY_LIMIT = 2048;
const DAY = 24 * 3_600_000;

let service: Service;
/** Clear API keys: `poor` belongs to an organization without credits, the others each to one with CREDITS. */
let keys: { reasons: string; limited: string; replayed: string; poor: string };
/**
 * The OpenAPI document as first served, before any other request: Elysia adds `additionalProperties:
 * false` to a route's response schemas when it first compiles the route (on its first request), and
 * the document is generated from the schemas as they are then.
 */
let firstDocument: Response;

beforeAll(async () => {
  service = await startService({
    env: { RATE_LIMIT: `${RATE_LIMIT_PER_MINUTE}/m`, BODY_LIMIT: String(BODY_LIMIT) },
    async prepare(cli) {
      const feed = [
        feedLine(FRESH, { merchantId: "m-2", price: "14.50", ageMs: 3_600_000 }),
        feedLine(FRESH, { merchantId: "m-1", price: "12.99", ageMs: 60_000 }),
        feedLine(STALE, { merchantId: "m-1", price: "3.10", ageMs: 2 * DAY }),
        feedLine(NO_DATA, null),
      ];
      expect(jsonOf(await cli(["import", "-", "--json"], { stdin: feed.join("\n") }))).toMatchObject({ read: 4, products: 3, offers: 3, rejected: [] });
      const organization = async (name: string, credits: number): Promise<string> => {
        const { id } = jsonOf(await cli(["orgs", "create", "--name", name, "--json"]));
        if (credits > 0) jsonOf(await cli(["credits", "grant", "--org", id, "--amount", String(credits), "--json"]));
        return jsonOf(await cli(["keys", "create", "--org", id, "--name", name, "--json"])).clearKey;
      };
      const [reasons, limited, replayed, poor] = await Promise.all([
        organization("Reasons", CREDITS),
        organization("Limited", CREDITS),
        organization("Replayed", CREDITS),
        organization("Poor", 0),
      ]);
      keys = { reasons: reasons!, limited: limited!, replayed: replayed!, poor: poor! };
    },
  });
  firstDocument = await service.request("/openapi.json");
});

afterAll(async () => {
  await service?.stop();
});

function price(gtin: string, key: string | null, headers: Record<string, string> = {}, query = ""): Promise<Response> {
  return service.request(`/api/v1/products/${gtin}/price${query}`, { headers: { ...headers, ...(key === null ? {} : { authorization: `Bearer ${key}` }) } });
}

async function envelope(response: Response): Promise<any> {
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toStartWith("application/json");
  const body = (await response.json()) as any;
  expect(body.meta.requestId).toBe(response.headers.get("x-request-id"));
  return body;
}

describe("GET /api/v1/products/{gtin}/price", () => {
  test("answers every reason with its status, bills only a fresh offer, and keeps the headers on each", async () => {
    const fresh = await price(FRESH, keys.reasons);
    expect(fresh.headers.get("ratelimit-policy")).toBe(`"default";q=${RATE_LIMIT_PER_MINUTE};w=60, "organization";q=${5 * RATE_LIMIT_PER_MINUTE};w=60`);
    expect(fresh.headers.get("ratelimit")).toMatch(/^"default";r=\d+;t=\d+$/);
    const freshBody = await envelope(fresh);
    expect(freshBody.meta).toMatchObject({ gtin: "04006381333931", reason: "fresh-offer", creditsConsumed: 1, creditsRemaining: CREDITS - 1 });
    expect(freshBody.data.offers.map((offer: any) => [offer.merchant.id, offer.price.formatted])).toEqual([
      ["m-1", "€12.99"],
      ["m-2", "€14.50"],
    ]);
    expect(freshBody.data.summary).toMatchObject({
      offerCount: 2,
      lowestPrice: { amount: 1299, currency: "EUR" },
      highestPrice: { amount: 1450, currency: "EUR" },
    });

    const french = await envelope(await price(FRESH, keys.reasons, { "accept-language": "fr-FR" }));
    expect(french.data.offers[0].price.formatted).toBe("12,99 €");
    expect(french.meta.creditsRemaining).toBe(CREDITS - 2);

    const noData = await envelope(await price(NO_DATA, keys.reasons));
    expect(noData.meta).toMatchObject({ gtin: "00000096385074", reason: "no-data", creditsConsumed: 0, creditsRemaining: CREDITS - 2 });
    expect(noData.data).toMatchObject({ offers: [], lastObservedAt: null, product: { title: `Product ${NO_DATA}` } });

    const stale = await envelope(await price(STALE, keys.reasons));
    expect(stale.meta).toMatchObject({ reason: "stale-data", creditsConsumed: 0, creditsRemaining: CREDITS - 2 });
    expect(stale.data.offers).toEqual([]);
    expect(Date.parse(stale.data.lastObservedAt)).toBeLessThan(Date.now() - DAY);

    const notFound = await expectProblem(service, await price(UNKNOWN, keys.reasons), 404, "product-not-found");
    expect(notFound.meta).toMatchObject({ gtin: "04012345678901", reason: "product-not-found", creditsConsumed: 0, creditsRemaining: CREDITS - 2 });

    const invalid = await expectProblem(service, await price("4006381333932", keys.reasons), 400, "invalid-gtin");
    expect(invalid.meta).toMatchObject({ gtin: "4006381333932", reason: "invalid-gtin", creditsConsumed: 0 });
    expect((await expectProblem(service, await price("not-a-gtin", keys.reasons), 400, "invalid-gtin")).meta).toMatchObject({ gtin: "not-a-gtin" });

    const broke = await expectProblem(service, await price(FRESH, keys.poor), 402, "insufficient-credits");
    expect(broke.meta).toMatchObject({ reason: "insufficient-credits", creditsConsumed: 0, creditsRemaining: 0 });

    const balance = await service.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${keys.reasons}` } });
    expect(await balance.json()).toMatchObject({ available: CREDITS - 2, reserved: 0 });
  });

  test("a missing, malformed or unknown key is 401 with WWW-Authenticate, and a bad language is 400", async () => {
    for (const [key, detail] of [
      [null, "required"],
      ["pps_short", "invalid"],
      [`${keys.reasons.slice(0, -1)}${keys.reasons.endsWith("A") ? "B" : "A"}`, "invalid"],
    ] as const) {
      const response = await price(FRESH, key);
      expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
      const problem = await expectProblem(service, response, 401, "unauthorized");
      expect(problem.detail).toContain(detail);
      expect(problem.meta).toMatchObject({ reason: "unauthorized", creditsRemaining: 0 });
    }
    expect((await expectProblem(service, await price(FRESH, keys.reasons, {}, "?language=de"), 400, "invalid-parameter")).meta).toMatchObject({
      reason: "invalid-parameter",
    });
  });

  test("past its rate limit a key gets 429 with Retry-After, unbilled, while another key is still served", async () => {
    const statuses: number[] = [];
    for (let request = 0; request < 2 * RATE_LIMIT_PER_MINUTE; request++) statuses.push((await price(UNKNOWN, keys.limited)).status);
    expect(statuses).toEqual(Array(2 * RATE_LIMIT_PER_MINUTE).fill(404));
    const limited = await price(FRESH, keys.limited);
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await expectProblem(service, limited, 429, "rate-limited")).meta).toMatchObject({
      reason: "rate-limited",
      creditsConsumed: 0,
      creditsRemaining: CREDITS,
    });
    expect((await price(FRESH, keys.replayed)).status).toBe(200);
  });

  test("an Idempotency-Key replays the billed answer without billing again, and refuses another GTIN", async () => {
    const idempotency = { "idempotency-key": crypto.randomUUID() };
    const first = await price(FRESH, keys.replayed, idempotency);
    const firstBody = await envelope(first);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    const again = await price(FRESH, keys.replayed, idempotency);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(await again.json()).toEqual(firstBody);
    await expectProblem(service, await price(STALE, keys.replayed, idempotency), 422, "unprocessable-body");
    const usage = await service.request("/api/v1/customer/billing/transactions?type=usage", { headers: { authorization: `Bearer ${keys.replayed}` } });
    expect(((await usage.json()) as { items: Array<{ requestId: string }> }).items.filter((row) => row.requestId === firstBody.meta.requestId)).toHaveLength(1);
  });
});

describe("errors of the HTTP layer", () => {
  test("an unknown route is 404, a body over BODY_LIMIT is 413, a non-JSON body is 415 (401 first on a secured route)", async () => {
    await expectProblem(service, await service.request("/api/v1/nowhere"), 404, "not-found");
    const headers = { "content-type": "application/json" };
    const oversized = JSON.stringify({ name: "x".repeat(BODY_LIMIT) });
    await expectProblem(service, await service.request("/api/v1/customer/api-keys", { method: "POST", headers, body: oversized }), 413, "payload-too-large");
    const chunked = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(oversized));
        controller.close();
      },
    });
    await expectProblem(service, await service.request("/api/v1/customer/api-keys", { method: "POST", headers, body: chunked }), 413, "payload-too-large");
    await expectProblem(
      service,
      await service.request("/api/v1/auth/dev-login", { method: "POST", headers: { "content-type": "text/plain" }, body: "email=x" }),
      415,
      "unsupported-media-type",
    );
    // On a secured route authentication comes first: a stranger's non-JSON body is 401.
    await expectProblem(
      service,
      await service.request("/api/v1/customer/api-keys", { method: "POST", headers: { "content-type": "text/plain" }, body: "name=x" }),
      401,
      "unauthorized",
    );
  });

  test("without an identity provider, production answers the session endpoints with 503", async () => {
    await expectProblem(service, await service.request("/api/v1/auth/me"), 503, "unavailable");
  });
});

describe("the service's own pages", () => {
  test("/healthz, /readyz and /metrics answer without a credential, and /metrics counts billed look-ups by reason", async () => {
    expect(await (await service.request("/healthz")).json()).toEqual({ status: "ok" });
    const ready = await service.request("/readyz");
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: "ready" });
    expect((await price(FRESH, keys.replayed)).status).toBe(200);
    const metrics = await service.request("/metrics");
    expect(metrics.status).toBe(200);
    expect(metrics.headers.get("content-type")).toStartWith("text/plain");
    expect(await metrics.text()).toContain("# TYPE price_service_http_requests_total counter");
    const series = (status: number, reason: string) =>
      `price_service_http_requests_total{method="GET",route="/api/v1/products/:gtin/price",status="${status}",reason="${reason}"}`;
    // The counter moves once the answer is sent, just after the client has it.
    let scrapes = await scrapeEach(service);
    for (let attempt = 0; attempt < 20 && summed(scrapes, series(200, "fresh-offer")) === 0; attempt++) {
      await Bun.sleep(50);
      scrapes = await scrapeEach(service);
    }
    expect(summed(scrapes, series(200, "fresh-offer"))).toBeGreaterThanOrEqual(1);
    expect(summed(scrapes, series(402, "insufficient-credits"))).toBe(1);
  });

  test("/docs is the API reference with its script embedded, and no external URL", async () => {
    const docs = await service.request("/docs");
    expect(docs.status).toBe(200);
    expect(docs.headers.get("content-type")).toStartWith("text/html");
    const html = await docs.text();
    expect(html).toContain('src="/docs/assets/scalar.js"');
    expect(html).not.toMatch(/(src|href)="https?:\/\//);
    const script = await service.request("/docs/assets/scalar.js");
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect((await script.arrayBuffer()).byteLength).toBeGreaterThan(100_000);
  });

  test("/openapi.json is a valid OpenAPI 3.1 document, the same one the sources serve", async () => {
    expect(firstDocument.status).toBe(200);
    const served: any = await firstDocument.json();
    const validator = new Validator();
    expect((await validator.validate(served)).errors ?? []).toEqual([]);
    expect(validator.version).toBe("3.1");
    // The same document first served by the sources in a fresh process with the same configuration
    // (not built in this one: its routes' schemas have been compiled by other tests).
    const sources = await spawnServe({
      databaseUrl: "sqlite::memory:",
      env: { PUBLIC_URL: service.publicURL, RATE_LIMIT: `${RATE_LIMIT_PER_MINUTE}/m`, BODY_LIMIT: String(BODY_LIMIT) },
    });
    try {
      expect(served).toEqual(await (await fetch(`${sources.url}/openapi.json`)).json());
    } finally {
      sources.child.kill("SIGTERM");
      await sources.child.exited;
    }
  });
});
