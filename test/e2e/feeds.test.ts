// Feeds over a real port, on the product under test (sources or PRICE_SERVICE_BIN): a URL source
// declared with the CLI is pulled by `serve` from a local HTTP server, and a billed look-up then
// answers `fresh-offer` for one of its products; a push with a feed token, a revoked one refused; a
// source writes only its own merchants' offers and never replaces another source's descriptions.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { feedServer } from "../feeds/feed-helpers";
import { expectProblem, feedLine, jsonOf, scrapeEach, type Service, startService, summed } from "./harness";

const PULLED = "4006381333931";
const PUSHED = "96385074";
let service: Service;
let customerKey: string;
let readToken: string;
let pushToken: string;
let pushTokenId: string;
let rogueToken: string;
const upstream = feedServer((request) =>
  request.headers.get("if-none-match") === '"feed-1"'
    ? new Response(null, { status: 304 })
    : new Response(feedLine(PULLED, { merchantId: "shop-a", price: "12.99", ageMs: 60_000 }), {
        headers: { etag: '"feed-1"', "content-type": "application/x-ndjson" },
      }),
);

// An internal host (127.0.0.2, outside the allowed 127.0.0.1/32) and a feed host that redirects to it.
const internalRequests: string[] = [];
const internal = Bun.serve({
  port: 0,
  hostname: "127.0.0.2",
  fetch: (request) => (internalRequests.push(request.url), new Response(feedLine(PULLED, { merchantId: "internal", price: "0.01", ageMs: 1000 }))),
});
const redirecting = feedServer(() => new Response(null, { status: 302, headers: { location: `http://127.0.0.2:${internal.port}/latest/meta-data` } }));

beforeAll(async () => {
  service = await startService({
    // The upstream feed server is on loopback: allowed explicitly, as an operator allows an on-premises feed host.
    env: { OUTBOUND_ALLOWED_NETWORKS: "127.0.0.1/32" },
    async prepare(cli) {
      const { id } = jsonOf(await cli(["orgs", "create", "--name", "Feeds", "--json"]));
      jsonOf(await cli(["credits", "grant", "--org", id, "--amount", "10", "--json"]));
      customerKey = jsonOf(await cli(["keys", "create", "--org", id, "--name", "feeds", "--json"])).clearKey;
      expect(
        jsonOf(
          await cli([
            "feeds",
            "add",
            "merchant-a",
            "--url",
            `${upstream.url}/feed.ndjson`,
            "--every",
            "1s",
            "--timeout",
            "5s",
            "--merchants",
            "shop-a",
            "--json",
          ]),
        ),
      ).toMatchObject({ name: "merchant-a", kind: "url", intervalSeconds: 1, merchants: ["shop-a"] });
      jsonOf(
        await cli([
          "feeds",
          "add",
          "redirecting",
          "--url",
          `${redirecting.url}/feed.ndjson`,
          "--every",
          "1s",
          "--timeout",
          "5s",
          "--merchants",
          "internal",
          "--json",
        ]),
      );
      jsonOf(await cli(["feeds", "add", "pos", "--push", "--merchants", "pos-1,pos-2", "--json"]));
      jsonOf(await cli(["feeds", "add", "rogue", "--push", "--merchants", "rogue-shop", "--json"]));
      rogueToken = jsonOf(await cli(["feeds", "token", "create", "--source", "rogue", "--json"])).clearToken;
      readToken = jsonOf(await cli(["feeds", "token", "create", "--read", "--name", "e2e", "--json"])).clearToken;
      const push = jsonOf(await cli(["feeds", "token", "create", "--source", "pos", "--json"]));
      pushToken = push.clearToken;
      pushTokenId = push.token.id;
    },
  });
}, 60_000);

afterAll(async () => {
  await service?.stop();
  upstream.stop();
  redirecting.stop();
  internal.stop(true);
});

async function runsOf(source: string): Promise<any[]> {
  const response = await service.request(`/api/v1/feeds/sources/${source}/runs`, { headers: { authorization: `Bearer ${readToken}` } });
  expect(response.status).toBe(200);
  return (await response.json()).items;
}

describe("feeds against the running product", () => {
  test("serve pulls a declared URL feed on its schedule, then a billed look-up answers fresh-offer for its product", async () => {
    const deadline = Date.now() + 15_000;
    let runs: any[] = [];
    while (Date.now() < deadline) {
      runs = await runsOf("merchant-a");
      if (runs.some((run) => run.status === "ok") && runs.some((run) => run.status === "not-modified")) break;
      await Bun.sleep(200);
    }
    expect(runs.find((run) => run.status === "ok")).toMatchObject({ trigger: "schedule", httpStatus: 200, recordsRead: 1, offers: 1, rejectedCount: 0 });
    // The next period's conditional request is answered 304.
    expect(runs.find((run) => run.status === "not-modified")).toMatchObject({ httpStatus: 304, recordsRead: 0 });
    expect(upstream.requests.some((request) => request.headers.get("if-none-match") === '"feed-1"')).toBe(true);

    const response = await service.request(`/api/v1/products/${PULLED}/price`, { headers: { authorization: `Bearer ${customerKey}` } });
    expect(response.status).toBe(200);
    const body = await response.json();
    expect(body.meta).toMatchObject({ reason: "fresh-offer", billable: true, creditsConsumed: 1, creditsRemaining: 9 });
    expect(body.data.offers.map((offer: any) => [offer.merchant.id, offer.price.amount])).toEqual([["shop-a", 1299]]);
  });

  test("a feed host redirecting to an internal address gets a failed run: the internal host is never asked, nothing is imported", async () => {
    const deadline = Date.now() + 15_000;
    let runs: any[] = [];
    while (Date.now() < deadline && runs.length === 0) {
      runs = await runsOf("redirecting");
      if (runs.length === 0) await Bun.sleep(200);
    }
    expect(runs[0]).toMatchObject({
      trigger: "schedule",
      status: "failed",
      recordsRead: 0,
      offers: 0,
      error: expect.stringContaining(`address 127.0.0.2 refused`),
    });
    expect(redirecting.requests.length).toBeGreaterThan(0);
    expect(internalRequests).toEqual([]);
    const response = await service.request(`/api/v1/products/${PULLED}/price`, { headers: { authorization: `Bearer ${customerKey}` } });
    expect((await response.json()).data.offers.map((offer: any) => offer.merchant.id)).not.toContain("internal");
  });

  test("the operator CLI and /metrics show the source's last success and fresh share", async () => {
    const list = jsonOf(await service.cli(["feeds", "list", "--json"]));
    expect(list.find((source: any) => source.name === "merchant-a")).toMatchObject({
      silent: false,
      merchants: ["shop-a"],
      location: `${upstream.url}/feed.ndjson`,
      freshness: { offers: 1, freshOffers: 1, freshRatio: 1 },
    });
    const sources = await service.request("/api/v1/feeds/sources", { headers: { authorization: `Bearer ${readToken}` } });
    expect((await sources.json()).items.find((source: any) => source.name === "merchant-a")).toMatchObject({ merchants: ["shop-a"], location: upstream.url });
    // Every instance reports the source's freshness (read from the database); the instances' run counters add up.
    const scrapes = await scrapeEach(service);
    for (const scrape of scrapes) expect(scrape).toContain('price_service_feed_fresh_ratio{source="merchant-a"} 1');
    expect(summed(scrapes, 'price_service_feed_runs_total{source="merchant-a",status="ok"}')).toBeGreaterThanOrEqual(1);
  });

  test("a source's push for another source's merchant is rejected with the reason; its own offer is written without replacing the product's title", async () => {
    const line = (merchantId: string, price: string, observedAt: number) =>
      JSON.stringify({
        gtin: PULLED,
        title: "FREE MONEY",
        imageUrl: "https://evil.example/x.jpg",
        merchantId,
        merchantName: "Hijacked",
        price,
        currency: "EUR",
        observedAt: new Date(observedAt).toISOString(),
      });
    const ahead = new Date(Date.now() + 3 * 60_000);
    const body = [line("shop-a", "0.01", Date.now()), line("rogue-shop", "13.50", Date.now() - 1000), line("rogue-shop", "0.02", ahead.getTime())].join("\n");
    const pushed = await service.request("/api/v1/feeds/push", {
      method: "POST",
      headers: { authorization: `Bearer ${rogueToken}`, "content-type": "application/x-ndjson" },
      body,
    });
    expect(pushed.status).toBe(200);
    const run = await pushed.json();
    expect(run).toMatchObject({ trigger: "push", status: "ok", recordsRead: 3, offers: 1, rejectedCount: 2 });
    expect(run.rejected).toEqual([
      { line: 1, error: 'merchantId: "shop-a" is not a merchant of source rogue (it may write rogue-shop)' },
      { line: 3, error: expect.stringMatching(/^observedAt: ".+" is more than 60 s in the future$/) },
    ]);
    expect((await runsOf("rogue"))[0]).toMatchObject({ id: run.id, rejectedCount: 2 });

    const response = await service.request(`/api/v1/products/${PULLED}/price`, { headers: { authorization: `Bearer ${customerKey}` } });
    const { data } = await response.json();
    expect(data.product).toMatchObject({ title: `Product ${PULLED}`, imageUrl: null });
    expect(data.offers.map((offer: any) => [offer.merchant.id, offer.merchant.name, offer.price.amount])).toEqual([
      ["shop-a", "Merchant shop-a", 1299],
      ["rogue-shop", "Hijacked", 1350],
    ]);
  });

  test("a push with a feed token is written and reported; after revocation it is 401 and nothing is written", async () => {
    const line = feedLine(PUSHED, { merchantId: "pos-1", price: "3.00", ageMs: 1000 });
    const pushed = await service.request("/api/v1/feeds/push", {
      method: "POST",
      headers: { authorization: `Bearer ${pushToken}`, "content-type": "application/x-ndjson" },
      body: `${line}\n{bad\n`,
    });
    expect(pushed.status).toBe(200);
    expect(await pushed.json()).toMatchObject({
      trigger: "push",
      status: "ok",
      recordsRead: 2,
      offers: 1,
      rejectedCount: 1,
      rejected: [{ line: 2, error: "not valid JSON" }],
    });

    expect(jsonOf(await service.cli(["feeds", "token", "revoke", pushTokenId, "--json"]))).toMatchObject({ id: pushTokenId });
    const refused = await service.request("/api/v1/feeds/push", {
      method: "POST",
      headers: { authorization: `Bearer ${pushToken}`, "content-type": "application/x-ndjson" },
      body: feedLine(PUSHED, { merchantId: "pos-2", price: "1.00", ageMs: 1000 }),
    });
    await expectProblem(service, refused, 401, "unauthorized");
    const look = await service.request(`/api/v1/products/${PUSHED}/price`, { headers: { authorization: `Bearer ${customerKey}` } });
    expect((await look.json()).data.offers.map((offer: any) => offer.merchant.id)).toEqual(["pos-1"]);
    expect((await runsOf("pos")).length).toBe(1);
  });
});
