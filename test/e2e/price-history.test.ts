// The price history endpoint over a real port, in production mode (the built executable when
// PRICE_SERVICE_BIN is set), on a history written by the operator's imports: both intervals, the
// billing of each reason, a page and its cursor, and the CLI's listing of the same history.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { expectProblem, feedLine, jsonOf, type Service, startService } from "./harness";

const GTIN = "4006381333931";
const EMPTY = "96385074";
const UNKNOWN = "4012345678901";
const DAY = 86_400_000;
const CREDITS = 20;

let service: Service;
let key: string;

beforeAll(async () => {
  service = await startService({
    async prepare(cli) {
      // Three imports, oldest first: each change of a price is a state of the history.
      for (const [price, ageMs] of [
        ["12.99", 3 * DAY],
        ["11.99", 2 * DAY],
        ["12.49", 60_000],
      ] as const) {
        const feed = [feedLine(GTIN, { merchantId: "m-1", price, ageMs }), feedLine(GTIN, { merchantId: "m-2", price: "15.00", ageMs }), feedLine(EMPTY, null)];
        expect(jsonOf(await cli(["import", "-", "--json"], { stdin: feed.join("\n") }))).toMatchObject({ rejected: [] });
      }
      const { id } = jsonOf(await cli(["orgs", "create", "--name", "History", "--json"]));
      jsonOf(await cli(["credits", "grant", "--org", id, "--amount", String(CREDITS), "--json"]));
      key = jsonOf(await cli(["keys", "create", "--org", id, "--name", "history", "--json"])).clearKey;
    },
  });
});

afterAll(async () => {
  await service?.stop();
});

const history = (gtin: string, query = "", headers: Record<string, string> = { authorization: `Bearer ${key}` }) =>
  service.request(`/api/v1/products/${gtin}/price/history${query}`, { headers });

test("the history of the imports, by change and by day, billed HISTORY_CREDIT_COST per answer with points", async () => {
  const changes = await history(GTIN, "?merchant=m-1");
  expect(changes.status).toBe(200);
  const body = await changes.json();
  expect(body.meta).toMatchObject({
    gtin: "04006381333931",
    facet: "product.price-history",
    reason: "history",
    billable: true,
    creditsConsumed: 2,
    creditsRemaining: CREDITS - 2,
  });
  expect(body.data.points.map((point: any) => [point.price.formatted, point.validTo === null])).toEqual([
    ["€12.99", false],
    ["€11.99", false],
    ["€12.49", true],
  ]);

  const days = await (await history(GTIN, "?interval=day&merchant=m-1&language=fr")).json();
  expect(days.meta.creditsRemaining).toBe(CREDITS - 4);
  expect(days.data.points).toHaveLength(4);
  expect(days.data.points[0].lastPrice.formatted).toBe("12,99 €");
  expect(days.data.points[3].lastPrice.formatted).toBe("12,49 €");

  // The operator's listing shows the same states.
  const listed = jsonOf(await service.cli(["history", "show", GTIN, "--merchant", "m-1", "--json"]));
  expect(listed.map((entry: any) => entry.priceAmount)).toEqual([1299, 1199, 1249]);
});

test("a page and its cursor: each page is an answer", async () => {
  const first = await (await history(GTIN, "?limit=2")).json();
  expect(first.data.points).toHaveLength(2);
  const second = await (await history(GTIN, `?limit=2&cursor=${first.data.nextCursor}`)).json();
  expect(second.data.points.length).toBeGreaterThan(0);
  expect(second.meta.reason).toBe("history");
  expect(second.meta.creditsRemaining).toBe(first.meta.creditsRemaining - 2);
});

test("no-data, product-not-found, invalid-gtin, a range too long and 401: none billed", async () => {
  expect((await history(GTIN, "?limit=1")).status).toBe(200);
  // The balance itself, read from the database: on two instances an answer's creditsRemaining is the answering instance's.
  const balance = await service.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${key}` } });
  const before = (await balance.json()).available;
  const none = await (await history(EMPTY)).json();
  expect(none.meta).toMatchObject({ reason: "no-data", billable: false, creditsRemaining: before });
  expect((await expectProblem(service, await history(UNKNOWN), 404, "product-not-found")).meta).toMatchObject({
    reason: "product-not-found",
    creditsRemaining: before,
  });
  expect((await expectProblem(service, await history("123"), 400, "invalid-gtin")).meta).toMatchObject({ reason: "invalid-gtin" });
  const from = new Date(Date.now() - 401 * DAY).toISOString();
  expect((await expectProblem(service, await history(GTIN, `?from=${from}`), 400, "invalid-parameter")).meta).toMatchObject({ reason: "invalid-parameter" });
  expect((await expectProblem(service, await history("123", "?from=nope", {}), 401, "unauthorized")).meta).toMatchObject({
    reason: "unauthorized",
    creditsRemaining: 0,
  });
});
