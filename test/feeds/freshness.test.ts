import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { publicLocation } from "../../src/modules/feeds/freshness";
import { createFeedToken } from "../../src/modules/feeds/tokens";
import { createOrganization, createTestContext, json, type TestContext } from "../support/context";
import { addSource, offerLine } from "./feed-helpers";

const PEN = "04006381333931";
const UPC = "00036000291452";
const HOUR = 3_600_000;
let context: TestContext;
let readToken: string;
let pushToken: string;

beforeEach(async () => {
  context = await createTestContext({ FRESHNESS_WINDOW: "24h" });
  const now = context.clock.now();
  const source = await addSource(context.store, { name: "pos", kind: "push" }, now);
  await addSource(
    context.store,
    { name: "quiet", kind: "url", location: "https://user:secret@feeds.example:8443/t/SECRET-PATH-TOKEN/feed.ndjson?apikey=SECRET-QUERY" },
    now,
  );
  readToken = (await createFeedToken(context.store, { scope: "read", sourceId: null, name: "ops", now })).clearToken;
  pushToken = (await createFeedToken(context.store, { scope: "push", sourceId: source.id, name: "pos", now })).clearToken;
});
afterEach(() => context.close());

async function pushLines(lines: string[]): Promise<void> {
  const response = await context.request("/api/v1/feeds/push", {
    method: "POST",
    headers: { authorization: `Bearer ${pushToken}`, "content-type": "application/x-ndjson" },
    body: lines.join("\n"),
  });
  expect(response.status).toBe(200);
}

const read = (path: string, token = readToken) => context.request(path, { headers: { authorization: `Bearer ${token}` } });

describe("freshness per source", () => {
  test("the source list shows each source's last success and the share of its offers still fresh", async () => {
    const now = context.clock.now();
    await pushLines([offerLine(PEN, "shop-a", "1.00", now - HOUR), offerLine(UPC, "shop-a", "2.00", now - 30 * HOUR)]);
    const response = await read("/api/v1/feeds/sources");
    expect(response.status).toBe(200);
    const { items } = await json(response);
    expect(items.map((s: any) => [s.name, s.kind, s.freshness, s.silent])).toEqual([
      ["pos", "push", { offers: 2, freshOffers: 1, freshRatio: 0.5 }, false],
      ["quiet", "url", { offers: 0, freshOffers: 0, freshRatio: 0 }, false],
    ]);
    expect(items[0].lastSuccessAt).toBe(new Date(now).toISOString());
    expect(items[1].location).toBe("https://feeds.example:8443");
  });

  test("the read endpoints show a URL source's scheme and host only: no user, password, path or query, where feed hosts put tokens", async () => {
    const response = await read("/api/v1/feeds/sources");
    const text = await response.text();
    expect(text).not.toContain("SECRET");
    expect(text).not.toContain("secret");
    expect(JSON.parse(text).items.find((s: any) => s.name === "quiet").location).toBe("https://feeds.example:8443");
  });

  test("a location shown over HTTP is a URL's scheme and host, or a directory as it is", () => {
    expect(publicLocation("https://ghp_SECRET@feeds.example/feed?apikey=SECRET&format=csv")).toBe("https://feeds.example");
    expect(publicLocation("http://feeds.example/SECRET/feed.ndjson#SECRET")).toBe("http://feeds.example");
    expect(publicLocation("/var/feeds/drop")).toBe("/var/feeds/drop");
    expect(publicLocation(null)).toBeNull();
  });

  test("/metrics has the last success, offer counts and fresh share per source, and counts runs", async () => {
    const now = context.clock.now();
    await pushLines([offerLine(PEN, "shop-a", "1.00", now - HOUR), offerLine(UPC, "shop-a", "2.00", now - 30 * HOUR), "oops"]);
    const text = await (await context.request("/metrics")).text();
    expect(text).toContain(`price_service_feed_last_success_timestamp_seconds{source="pos"} ${now / 1000}`);
    expect(text).toContain('price_service_feed_last_success_timestamp_seconds{source="quiet"} 0');
    expect(text).toContain('price_service_feed_offers{source="pos"} 2');
    expect(text).toContain('price_service_feed_fresh_offers{source="pos"} 1');
    expect(text).toContain('price_service_feed_fresh_ratio{source="pos"} 0.5');
    expect(text).toContain('price_service_feed_runs_total{source="pos",status="ok"} 1');
    expect(text).toContain('price_service_feed_records_total{source="pos",outcome="rejected"} 1');
    // Time passes: the offer that was fresh goes stale.
    context.clock.advance(24 * HOUR);
    expect(await (await context.request("/metrics")).text()).toContain('price_service_feed_fresh_ratio{source="pos"} 0');
  });

  test("a source that has not delivered within the window is logged once as a warning, and shown as silent", async () => {
    await pushLines([offerLine(PEN, "shop-a", "1.00", context.clock.now())]);
    expect(await context.services.feeds.warnAboutSilentSources()).toEqual([]);
    context.clock.advance(25 * HOUR);
    expect(await context.services.feeds.warnAboutSilentSources()).toEqual(["pos", "quiet"]);
    expect(await context.services.feeds.warnAboutSilentSources()).toEqual(["pos", "quiet"]);
    context.services.logger.flush();
    const warnings = context.logs
      .join("")
      .split("\n")
      .filter((line) => line.includes("has not delivered within the freshness window"));
    expect(warnings.length).toBe(2);
    expect(warnings[0]).toContain('"level":"warn"');
    expect(warnings[0]).toContain('"source":"pos"');
    const { items } = await json(await read("/api/v1/feeds/sources"));
    expect(items.map((s: any) => s.silent)).toEqual([true, true]);
  });
});

describe("operator read endpoints", () => {
  test("a source's runs are listed newest first, with paging", async () => {
    for (let i = 0; i < 3; i++) await pushLines([offerLine(PEN, "shop-a", `1.0${i}`, context.clock.now()), "{"]);
    const first = await json(await read("/api/v1/feeds/sources/pos/runs?limit=2"));
    expect(first.items).toHaveLength(2);
    expect(first.items[0]).toMatchObject({
      trigger: "push",
      status: "ok",
      recordsRead: 2,
      offers: 1,
      rejectedCount: 1,
      rejected: [{ line: 2, error: "not valid JSON" }],
    });
    expect(first.nextCursor).toBe(first.items[1].id);
    const second = await json(await read(`/api/v1/feeds/sources/pos/runs?limit=2&cursor=${first.nextCursor}`));
    expect(second.items).toHaveLength(1);
    expect(second.nextCursor).toBeNull();
    expect(first.items[0].id > first.items[1].id && first.items[1].id > second.items[0].id).toBe(true);
  });

  test("an unknown source is 404; a bad limit is 400", async () => {
    const missing = await read("/api/v1/feeds/sources/nope/runs");
    expect(missing.status).toBe(404);
    expect((await json(missing)).type).toEndWith("/problems/not-found");
    expect((await read("/api/v1/feeds/sources/pos/runs?limit=0")).status).toBe(400);
  });

  test("a push token, an API key, a session-less request or a revoked read token cannot read", async () => {
    expect((await read("/api/v1/feeds/sources", pushToken)).status).toBe(403);
    const organization = await createOrganization(context, 0);
    expect((await read("/api/v1/feeds/sources", organization.clearKey)).status).toBe(401);
    const anonymous = await context.request("/api/v1/feeds/sources");
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("www-authenticate")).toBe('Bearer realm="price-service"');
    const [id] = readToken.split(".");
    await context.store.revokeFeedToken(id!, context.clock.now());
    expect((await read("/api/v1/feeds/sources")).status).toBe(401);
  });

  test("a feed token is not a customer credential", async () => {
    const response = await context.request("/api/v1/products/4006381333931/price", { headers: { authorization: `Bearer ${readToken}` } });
    expect(response.status).toBe(401);
  });
});
