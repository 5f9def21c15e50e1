// The batch look-up over a real port: a customer's keys made through the API, a batch
// with every reason, its replay, and a key capped by its monthly credit limit.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { developmentSignIn, expectProblem, feedLine, postJSON, type Service, startService } from "./harness";

const KEYS = "/api/v1/customer/api-keys";
const PRICES = "/api/v1/products/prices";
const FRESH = "4006381333931";
const STALE = "5901234123457";
const NO_DATA = "96385074";
const UNKNOWN = "4012345678901";
const DAY = 24 * 3_600_000;
const TRIAL_CREDITS = 20;

let service: Service;

beforeAll(async () => {
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: String(TRIAL_CREDITS) },
    prepare: async (cli) =>
      void (await cli(["import", "-"], {
        stdin: [
          feedLine(FRESH, { merchantId: "m-1", price: "12.99", ageMs: 60_000 }),
          feedLine(STALE, { merchantId: "m-1", price: "3.10", ageMs: 2 * DAY }),
          feedLine(NO_DATA, null),
        ].join("\n"),
      })),
  });
});

afterAll(async () => {
  await service?.stop();
});

/** A new customer (TRIAL_CREDITS) and a key of theirs with `controls`. */
async function customerKey(email: string, controls: Record<string, unknown> = {}) {
  const { cookie } = await developmentSignIn(service, email);
  const headers = { cookie, origin: service.publicURL };
  const created = await postJSON(service, KEYS, { name: "batch", ...controls }, headers);
  expect(created.status).toBe(201);
  const { key, clearKey } = (await created.json()) as any;
  return { key, clearKey, headers };
}

function batch(clearKey: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return postJSON(service, PRICES, body, { authorization: `Bearer ${clearKey}`, ...headers });
}

describe("POST /api/v1/products/prices", () => {
  test("a batch with every reason: items in the order asked, only the fresh GTIN billed, once; its replay is not billed again", async () => {
    const { clearKey } = await customerKey("batch-reasons@example.com");
    const asked = [FRESH, STALE, NO_DATA, UNKNOWN, "4006381333932", `0${FRESH}`];
    const response = await batch(clearKey, { gtins: asked }, { "idempotency-key": "e2e-batch-1" });
    expect(response.status).toBe(200);
    expect(response.headers.get("ratelimit-policy")).toMatch(/^"default";q=\d+;w=\d+;qu="items", "organization";q=\d+;w=\d+;qu="items"$/);
    const body = (await response.json()) as any;
    expect(body.meta).toMatchObject({
      requestId: response.headers.get("x-request-id"),
      facet: "product.price",
      billable: true,
      creditsConsumed: 1,
      creditsRemaining: TRIAL_CREDITS - 1,
      itemCount: 6,
      reasons: { "fresh-offer": 2, "stale-data": 1, "no-data": 1, "product-not-found": 1, "invalid-gtin": 1, "insufficient-credits": 0 },
    });
    expect(body.data.map((item: any) => [item.input, item.gtin, item.reason])).toEqual([
      [FRESH, `0${FRESH}`, "fresh-offer"],
      [STALE, `0${STALE}`, "stale-data"],
      [NO_DATA, `000000${NO_DATA}`, "no-data"],
      [UNKNOWN, `0${UNKNOWN}`, "product-not-found"],
      ["4006381333932", "4006381333932", "invalid-gtin"],
      [`0${FRESH}`, `0${FRESH}`, "fresh-offer"],
    ]);
    expect(body.data[0].data.offers[0].price.formatted).toBe("€12.99");
    expect(body.data[3].problem).toMatchObject({ type: `${service.publicURL}/problems/product-not-found`, status: 404 });

    const replay = await batch(clearKey, { gtins: asked }, { "idempotency-key": "e2e-batch-1" });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await replay.json()).toEqual(body);
    const after = (await (await batch(clearKey, { gtins: ["1"] })).json()) as any;
    expect(after.meta).toMatchObject({ creditsConsumed: 0, creditsRemaining: TRIAL_CREDITS - 1 });

    const invalid = await expectProblem(service, await batch(clearKey, { gtins: [] }), 422, "unprocessable-body");
    expect(invalid.meta).toMatchObject({ reason: "invalid-parameter" });
    await expectProblem(service, await batch("pps_nope", { gtins: [FRESH] }), 401, "unauthorized");
  });

  test("a capped key: a batch reserves every well-formed GTIN against the cap, so its bill is predictable; past it, 402 while another key works", async () => {
    const { key, clearKey, headers } = await customerKey("batch-capped@example.com", { monthlyCreditLimit: 3 });
    // Four well-formed GTINs need four credits: more than the cap, so nothing is served or billed.
    const tooBig = await expectProblem(service, await batch(clearKey, { gtins: [FRESH, STALE, NO_DATA, UNKNOWN] }), 402, "insufficient-credits");
    expect(tooBig.detail).toContain("monthly credit limit of 3 credits");
    expect(tooBig.meta).toMatchObject({ reason: "insufficient-credits", creditsConsumed: 0, creditsRemaining: TRIAL_CREDITS });
    // Two GTINs reserve two credits; only the fresh one is billed.
    for (let round = 0; round < 2; round++) {
      const served = (await (await batch(clearKey, { gtins: [FRESH, STALE] })).json()) as any;
      expect(served.meta).toMatchObject({ creditsConsumed: 1, reasons: { "fresh-offer": 1, "stale-data": 1 } });
    }
    // Spent 2 of 3: two more GTINs do not fit, one does.
    await expectProblem(service, await batch(clearKey, { gtins: [FRESH, STALE] }), 402, "insufficient-credits");
    expect(((await (await batch(clearKey, { gtins: [FRESH] })).json()) as any).meta.creditsConsumed).toBe(1);
    await expectProblem(service, await batch(clearKey, { gtins: [FRESH] }), 402, "insufficient-credits");

    const listed = (await (await service.request(KEYS, { headers })).json()) as any;
    expect(listed.items.find((item: any) => item.id === key.id)).toMatchObject({ monthlyCreditLimit: 3, creditsSpentThisMonth: 3 });
    const other = await postJSON(service, KEYS, { name: "other" }, headers);
    const otherKey = ((await other.json()) as any).clearKey;
    expect(((await (await batch(otherKey, { gtins: [FRESH] })).json()) as any).meta).toMatchObject({ creditsConsumed: 1, creditsRemaining: TRIAL_CREDITS - 4 });
  });
});
