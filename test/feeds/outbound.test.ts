// Feed pulls under the outbound policy, in production mode: the test's local servers are reachable
// only because OUTBOUND_ALLOWED_NETWORKS lists 127.0.0.1/32; 127.0.0.2 stands for an internal host.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createTestContext, queryRows, type TestContext } from "../support/context";
import { addSource, feedServer, offerLine } from "./feed-helpers";

const PEN = "04006381333931";
let context: TestContext;
let stops: Array<() => void>;
const names = new Map<string, string[]>();

beforeEach(async () => {
  stops = [];
  names.clear();
  const resolve = async (hostname: string) => names.get(hostname) ?? [];
  context = await createTestContext({ PRICE_ENV: "production", OUTBOUND_ALLOWED_NETWORKS: "127.0.0.1/32" }, { outbound: { resolve } });
});
afterEach(async () => {
  for (const stop of stops) stop();
  await context.services.feeds.drain();
  await context.close();
});

function serve(handler: (request: Request) => Response | Promise<Response>, hostname = "127.0.0.1") {
  if (hostname === "127.0.0.1") {
    const server = feedServer(handler);
    stops.push(server.stop);
    return server;
  }
  const requests: Request[] = [];
  const server = Bun.serve({ port: 0, hostname, fetch: (request) => (requests.push(request), handler(request)) });
  stops.push(() => server.stop(true));
  return { url: `http://${hostname}:${server.port}`, requests };
}

async function pull(location: string) {
  const source = await addSource(context.store, { name: "shop", kind: "url", location, retries: 2 }, context.clock.now());
  const [run] = (await context.services.feeds.runNow(source))!;
  return run!;
}

async function offerCount(): Promise<number> {
  const [row] = await queryRows<{ n: number }>(context.store, "SELECT count(*) AS n FROM offers");
  return Number(row!.n);
}

describe("feed pulls under the outbound policy", () => {
  test("a redirect from an allowed host to an internal address is refused: nothing is requested there, nothing imported", async () => {
    const internal = serve(() => new Response(offerLine(PEN, "internal", "0.01", context.clock.now() - 1000)), "127.0.0.2");
    const feed = serve(() => new Response(null, { status: 302, headers: { location: `${internal.url}/latest/meta-data` } }));
    const run = await pull(`${feed.url}/feed.ndjson`);
    expect(run).toMatchObject({ status: "failed", attempts: 1, offers: 0 });
    expect(run.error).toBe("request refused: address 127.0.0.2 refused: not a public address (see OUTBOUND_ALLOWED_NETWORKS)");
    expect(feed.requests).toHaveLength(1);
    expect(internal.requests).toHaveLength(0);
    expect(await offerCount()).toBe(0);
  });

  test("a redirect to an allowed address is followed, checked again at each hop", async () => {
    const feed = serve((request) =>
      new URL(request.url).pathname === "/old"
        ? new Response(null, { status: 301, headers: { location: "/new.ndjson" } })
        : new Response(offerLine(PEN, "shop-a", "9.99", context.clock.now() - 1000)),
    );
    expect(await pull(`${feed.url}/old`)).toMatchObject({ status: "ok", httpStatus: 200, offers: 1 });
    expect(feed.requests.map((request) => new URL(request.url).pathname)).toEqual(["/old", "/new.ndjson"]);
  });

  test("a name is resolved once and the connection goes to the checked address, with the name in the Host header", async () => {
    const feed = serve(() => new Response(offerLine(PEN, "shop-a", "9.99", context.clock.now() - 1000)));
    names.set("feeds.shop.test", ["127.0.0.1"]);
    const port = new URL(feed.url).port;
    expect(await pull(`http://feeds.shop.test:${port}/feed.ndjson`)).toMatchObject({ status: "ok", offers: 1 });
    expect(feed.requests[0]!.headers.get("host")).toBe(`feeds.shop.test:${port}`);
  });

  test("a name resolving to any refused address is refused, also when another of its addresses is allowed", async () => {
    const feed = serve(() => new Response(offerLine(PEN, "shop-a", "9.99", context.clock.now() - 1000)));
    names.set("rebinding.test", ["127.0.0.1", "169.254.169.254"]);
    const run = await pull(`http://rebinding.test:${new URL(feed.url).port}/feed.ndjson`);
    expect(run).toMatchObject({ status: "failed", attempts: 1 });
    expect(run.error).toContain("address 169.254.169.254 refused");
    expect(feed.requests).toHaveLength(0);
  });

  test("without the allow-list a loopback feed is refused in production", async () => {
    const feed = serve(() => new Response(offerLine(PEN, "shop-a", "9.99", context.clock.now() - 1000)));
    await context.close();
    context = await createTestContext({ PRICE_ENV: "production" });
    const run = await pull(`${feed.url}/feed.ndjson`);
    expect(run).toMatchObject({ status: "failed", attempts: 1 });
    expect(run.error).toContain("address 127.0.0.1 refused");
    expect(feed.requests).toHaveLength(0);
  });
});
