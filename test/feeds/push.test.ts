import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createFeedToken } from "../../src/modules/feeds/tokens";
import { createOrganization, createTestContext, json, queryRows, type TestContext } from "../support/context";
import { addSource, offerLine } from "./feed-helpers";

const PEN = "04006381333931";
const UPC = "00036000291452";
let context: TestContext;
let pushToken: string;
let pushTokenId: string;
let sourceId: string;

beforeEach(async () => {
  context = await createTestContext({ FEED_BODY_LIMIT: "4096" });
  const source = await addSource(context.store, { name: "pos-system", kind: "push" }, context.clock.now());
  sourceId = source.id;
  const created = await createFeedToken(context.store, { scope: "push", sourceId, name: "pos", now: context.clock.now() });
  pushToken = created.clearToken;
  pushTokenId = created.token.id;
});
afterEach(() => context.close());

function push(body: BodyInit, headers: Record<string, string> = {}): Promise<Response> {
  return context.request("/api/v1/feeds/push", {
    method: "POST",
    headers: { authorization: `Bearer ${pushToken}`, "content-type": "application/x-ndjson", ...headers },
    body,
  });
}

async function offerCount(): Promise<number> {
  const [row] = await queryRows<{ n: number }>(context.store, "SELECT count(*) AS n FROM offers");
  return Number(row!.n);
}

describe("POST /api/v1/feeds/push", () => {
  test("a pushed NDJSON feed is written for the token's source and answered with the run's report", async () => {
    const now = context.clock.now();
    const response = await push([offerLine(PEN, "shop-a", "12.99", now - 1000), offerLine(UPC, "shop-a", "2.50", now - 1000)].join("\n"));
    expect(response.status).toBe(200);
    const run = await json(response);
    expect(run).toMatchObject({ sourceId, trigger: "push", status: "ok", recordsRead: 2, products: 2, offers: 2, rejectedCount: 0, rejected: [], error: null });
    expect(run.id).toStartWith("run_");
    expect((await context.store.findProductWithOffers(PEN))?.offers.map((o) => o.priceAmount)).toEqual([1299]);
    const rows = await queryRows<{ source_id: string }>(context.store, "SELECT source_id FROM offers");
    expect(rows.map((row) => row.source_id)).toEqual([sourceId, sourceId]);
    const runs = await context.store.listFeedRuns(sourceId, { limit: 10 });
    expect(runs.items.map((r) => [r.id, r.status, r.offers])).toEqual([[run.id, "ok", 2]]);
    expect((await context.store.getFeedSource(sourceId))?.lastSuccessAt).toBe(context.clock.now());
  });

  test("a half-bad feed writes its good lines and reports the bad ones with their line numbers", async () => {
    const now = context.clock.now();
    const body = [
      offerLine(PEN, "shop-a", "12.99", now),
      "{broken",
      offerLine("4006381333932", "shop-a", "1.00", now),
      offerLine(UPC, "shop-b", "12,99", now),
      offerLine(UPC, "shop-a", "2.50", now),
    ].join("\n");
    const response = await push(body);
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({
      status: "ok",
      recordsRead: 5,
      products: 2,
      offers: 2,
      rejectedCount: 3,
      rejected: [
        { line: 2, error: "not valid JSON" },
        { line: 3, error: 'gtin: "4006381333932" is not a valid GTIN' },
        { line: 4, error: 'price: "12,99" is not a decimal amount' },
      ],
    });
    expect(await offerCount()).toBe(2);
  });

  test("a CSV feed is read by its header, and a gzip body is decompressed", async () => {
    const now = new Date(context.clock.now()).toISOString();
    const csv = `gtin,merchantId,price,currency,observedAt\n${PEN},shop-a,3.10,EUR,${now}\n`;
    expect(await json(await push(csv, { "content-type": "text/csv; charset=utf-8" }))).toMatchObject({ status: "ok", recordsRead: 1, offers: 1 });
    const gzipped = Bun.gzipSync(new TextEncoder().encode(offerLine(UPC, "shop-a", "4.20", context.clock.now())));
    expect(await json(await push(gzipped, { "content-encoding": "gzip" }))).toMatchObject({ status: "ok", recordsRead: 1, offers: 1 });
    expect(await offerCount()).toBe(2);
  });

  test("when the token is revoked: 401, nothing written, no run", async () => {
    await context.store.revokeFeedToken(pushTokenId, context.clock.now());
    const response = await push(offerLine(PEN, "shop-a", "12.99", context.clock.now()));
    expect(response.status).toBe(401);
    expect(response.headers.get("www-authenticate")).toBe('Bearer realm="price-service"');
    expect(response.headers.get("content-type")).toStartWith("application/problem+json");
    expect(await json(response)).toMatchObject({ type: "http://localhost:8080/problems/unauthorized", status: 401, detail: "The feed token is revoked." });
    expect(await offerCount()).toBe(0);
    expect(await context.store.countProducts()).toBe(0);
    expect((await context.store.listFeedRuns(sourceId, { limit: 10 })).items).toEqual([]);
  });

  test("when the source is removed its tokens stop working", async () => {
    await context.store.removeFeedSource(sourceId, context.clock.now());
    const response = await push(offerLine(PEN, "shop-a", "12.99", context.clock.now()));
    expect(response.status).toBe(401);
    expect(await offerCount()).toBe(0);
  });

  test("a customer API key is never a feed token: 401, nothing written", async () => {
    const organization = await createOrganization(context, 10);
    const response = await push(offerLine(PEN, "shop-a", "12.99", context.clock.now()), { authorization: `Bearer ${organization.clearKey}` });
    expect(response.status).toBe(401);
    expect((await json(response)).detail).toBe("The feed token is invalid (API keys are not accepted here).");
    expect(await offerCount()).toBe(0);
  });

  test("without a token, with a wrong secret, or in French", async () => {
    const missing = await context.request("/api/v1/feeds/push", { method: "POST", headers: { "content-type": "application/x-ndjson" }, body: "{}" });
    expect(missing.status).toBe(401);
    expect(missing.headers.get("www-authenticate")).toBe('Bearer realm="price-service"');
    const [id] = pushToken.split(".");
    const wrong = await push("{}", { authorization: `Bearer ${id}.${"A".repeat(43)}`, "accept-language": "fr" });
    expect(wrong.status).toBe(401);
    expect((await json(wrong)).detail).toBe("Le jeton de flux est invalide (les clés d'API ne sont pas acceptées ici).");
    expect(await offerCount()).toBe(0);
  });

  test("a read token cannot push: 403", async () => {
    const read = await createFeedToken(context.store, { scope: "read", sourceId: null, name: "dashboards", now: context.clock.now() });
    const response = await push(offerLine(PEN, "shop-a", "12.99", context.clock.now()), { authorization: `Bearer ${read.clearToken}` });
    expect(response.status).toBe(403);
    expect((await json(response)).type).toEndWith("/problems/forbidden");
    expect(await offerCount()).toBe(0);
  });

  test("a body that is not NDJSON or CSV is 415", async () => {
    const response = await push("{}", { "content-type": "application/json" });
    expect(response.status).toBe(415);
    expect((await json(response)).type).toEndWith("/problems/unsupported-media-type");
  });

  test("a declared body over FEED_BODY_LIMIT is 413 before anything is written", async () => {
    const line = offerLine(PEN, "shop-a", "12.99", context.clock.now());
    const body = Array.from({ length: 40 }, () => line).join("\n");
    expect(body.length).toBeGreaterThan(4096);
    const response = await push(body);
    expect(response.status).toBe(413);
    expect(await offerCount()).toBe(0);
  });

  test("a streamed body that passes FEED_BODY_LIMIT is cut off: 413 with the run's report", async () => {
    const line = offerLine(PEN, "shop-a", "12.99", context.clock.now());
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 40; i++) controller.enqueue(new TextEncoder().encode(`${line}\n`));
        controller.close();
      },
    });
    const response = await push(stream);
    expect(response.status).toBe(413);
    const body = await json(response);
    expect(body.run).toMatchObject({ status: "failed", error: "the body is larger than the limit of 4096 bytes" });
    expect((await context.store.listFeedRuns(sourceId, { limit: 10 })).items[0]).toMatchObject({ status: "failed" });
  });
});
