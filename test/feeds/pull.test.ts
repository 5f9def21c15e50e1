import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Store } from "../../src/db/store";
import { systemClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createAddressPolicy, createOutboundClient } from "../../src/lib/outbound";
import { scanDirectorySource } from "../../src/modules/feeds/pull";
import { FeedScheduler } from "../../src/modules/feeds/scheduler";
import { openTestStore, queryRows } from "../support/context";
import { addSource, feedServer, offerLine } from "./feed-helpers";

const PEN = "04006381333931";
const UPC = "00036000291452";
let store: Store;
let logs: string[];
let scheduler: FeedScheduler;
let logger: ReturnType<typeof createLogger>;
let stops: Array<() => void>;

beforeEach(async () => {
  store = await openTestStore();
  const captured: string[] = [];
  logs = captured;
  stops = [];
  logger = createLogger({ level: "info", write: (chunk) => captured.push(chunk) });
  scheduler = new FeedScheduler({
    store,
    clock: systemClock,
    logger,
    freshnessWindowMs: 86_400_000,
    outbound: createOutboundClient({ policy: createAddressPolicy({ allowedNetworks: [], allowLoopback: true }) }),
    sleep: (ms) => Bun.sleep(ms),
    retryBaseMs: 20,
    bodyLimitBytes: 1_000_000,
    userAgent: "price-service/test",
  });
});
afterEach(async () => {
  for (const stop of stops) stop();
  await scheduler.drain();
  await store.close();
});

function serve(handler: (request: Request) => Response | Promise<Response>) {
  const server = feedServer(handler);
  stops.push(server.stop);
  return server;
}

async function offerCount(): Promise<number> {
  const [row] = await queryRows<{ n: number }>(store, "SELECT count(*) AS n FROM offers");
  return Number(row!.n);
}

describe("URL sources", () => {
  test("a source that answers 304 to the conditional request: a not-modified run that writes nothing", async () => {
    const body = offerLine(PEN, "shop-a", "12.99", Date.now() - 1000);
    const server = serve((request) =>
      request.headers.get("if-none-match") === '"v1"'
        ? new Response(null, { status: 304 })
        : new Response(body, { headers: { etag: '"v1"', "last-modified": "Sun, 22 Nov 2026 09:00:00 GMT", "content-type": "application/x-ndjson" } }),
    );
    const source = await addSource(store, { name: "shop-a", kind: "url", location: `${server.url}/feed.ndjson` }, Date.now());
    const [first] = (await scheduler.runNow(source))!;
    expect(first).toMatchObject({ status: "ok", httpStatus: 200, recordsRead: 1, offers: 1, attempts: 1, trigger: "manual" });
    expect(await store.getFeedSource(source.id)).toMatchObject({ etag: '"v1"', lastModified: "Sun, 22 Nov 2026 09:00:00 GMT", leaseOwner: null });

    await queryRows(store, "DELETE FROM offers");
    const [second] = (await scheduler.runNow((await store.getFeedSource(source.id))!))!;
    expect(second).toMatchObject({ status: "not-modified", httpStatus: 304, recordsRead: 0, offers: 0 });
    expect(server.requests[1]!.headers.get("if-none-match")).toBe('"v1"');
    expect(server.requests[1]!.headers.get("if-modified-since")).toBe("Sun, 22 Nov 2026 09:00:00 GMT");
    expect(server.requests[1]!.headers.get("accept-encoding")).toContain("gzip");
    expect(await offerCount()).toBe(0);
    expect((await store.getFeedSource(source.id))!.lastSuccessAt).toBe(second!.startedAt + second!.durationMs);
  });

  test("a source that times out: every attempt is made with back-off, then a failed run", async () => {
    // Answers only when the test ends: every attempt runs into the source's 200 ms timeout.
    const never = Promise.withResolvers<void>();
    stops.push(never.resolve);
    const server = serve(async () => {
      await never.promise;
      return new Response("");
    });
    const source = await addSource(store, { name: "slow", kind: "url", location: `${server.url}/feed`, timeoutMs: 200, retries: 2 }, Date.now());
    const [run] = (await scheduler.runNow(source))!;
    expect(run).toMatchObject({ status: "failed", attempts: 3, recordsRead: 0, error: "timed out after 200 ms (3 attempts)" });
    expect(server.requests.length).toBe(3);
    expect(run!.durationMs).toBeGreaterThanOrEqual(600);
    const stored = (await store.getFeedSource(source.id))!;
    expect(stored.lastSuccessAt).toBeNull();
    expect(stored.leaseOwner).toBeNull();
    logger.flush();
    expect(logs.join("")).toContain('"message":"feed run failed"');
  });

  test("a 503 is retried and the next answer is taken; a 404 is not retried", async () => {
    let calls = 0;
    const server = serve((request) => {
      if (new URL(request.url).pathname === "/missing") return new Response("no", { status: 404 });
      return ++calls === 1 ? new Response("busy", { status: 503 }) : new Response(offerLine(PEN, "shop-a", "1.00", Date.now()));
    });
    const flaky = await addSource(store, { name: "flaky", kind: "url", location: `${server.url}/feed`, retries: 2 }, Date.now());
    expect((await scheduler.runNow(flaky))![0]).toMatchObject({ status: "ok", attempts: 2, offers: 1 });
    const missing = await addSource(store, { name: "missing", kind: "url", location: `${server.url}/missing`, retries: 2 }, Date.now());
    expect((await scheduler.runNow(missing))![0]).toMatchObject({ status: "failed", attempts: 1, httpStatus: 404, error: "HTTP 404" });
  });

  test("a source that serves a half-bad file: good lines written, bad ones reported with their line numbers", async () => {
    const now = Date.now();
    const body = [offerLine(PEN, "shop-a", "12.99", now), "not json", offerLine(UPC, "shop-a", "abc", now), offerLine(UPC, "shop-b", "2.50", now)].join("\n");
    const server = serve(() => new Response(body));
    const source = await addSource(store, { name: "half-bad", kind: "url", location: `${server.url}/feed.ndjson` }, now);
    const [run] = (await scheduler.runNow(source))!;
    expect(run).toMatchObject({
      status: "ok",
      recordsRead: 4,
      products: 2,
      offers: 2,
      rejectedCount: 2,
      rejected: [
        { line: 2, error: "not valid JSON" },
        { line: 3, error: 'price: "abc" is not a decimal amount' },
      ],
    });
    expect(await offerCount()).toBe(2);
    const runs = await store.listFeedRuns(source.id, { limit: 5 });
    expect(runs.items[0]!.rejected).toEqual(run!.rejected);
  });

  test("a pulled record for a merchant the source is not bound to is rejected and reported; the source's own are written", async () => {
    const now = Date.now();
    const body = [offerLine(PEN, "shop-a", "12.99", now), offerLine(PEN, "shop-x", "0.01", now, { merchantName: "Not yours" })].join("\n");
    const server = serve(() => new Response(body));
    const source = await addSource(store, { name: "merchant-a", kind: "url", location: `${server.url}/feed.ndjson`, merchants: ["shop-a"] }, now);
    const [run] = (await scheduler.runNow(source))!;
    expect(run).toMatchObject({
      status: "ok",
      recordsRead: 2,
      offers: 1,
      rejectedCount: 1,
      rejected: [{ line: 2, error: 'merchantId: "shop-x" is not a merchant of source merchant-a (it may write shop-a)' }],
    });
    expect((await store.findProductWithOffers(PEN))!.offers.map((offer) => offer.merchantId)).toEqual(["shop-a"]);
    expect(await queryRows(store, "SELECT id FROM merchants WHERE id = 'shop-x'")).toEqual([]);
  });

  test("gzip: Content-Encoding is decoded, a .csv.gz file is gunzipped and read as CSV", async () => {
    const now = new Date().toISOString();
    const csv = `gtin,merchantId,price,currency,observedAt\n${PEN},shop-a,3.10,EUR,${now}\n${UPC},shop-a,4.10,EUR,${now}\n`;
    const server = serve((request) =>
      new URL(request.url).pathname.endsWith(".gz")
        ? new Response(Bun.gzipSync(new TextEncoder().encode(csv)), { headers: { "content-type": "application/gzip" } })
        : new Response(Bun.gzipSync(new TextEncoder().encode(offerLine(PEN, "shop-z", "9.99", Date.now()))), { headers: { "content-encoding": "gzip" } }),
    );
    const encoded = await addSource(store, { name: "encoded", kind: "url", location: `${server.url}/feed`, merchants: ["shop-a", "shop-z"] }, Date.now());
    expect((await scheduler.runNow(encoded))![0]).toMatchObject({ status: "ok", offers: 1 });
    const file = await addSource(store, { name: "file", kind: "url", location: `${server.url}/feed.csv.gz` }, Date.now());
    expect((await scheduler.runNow(file))![0]).toMatchObject({ status: "ok", recordsRead: 2, offers: 2 });
  });

  test("a .gz file served with Content-Encoding: gzip (decoded by fetch already) is read, not gunzipped twice", async () => {
    const server = serve(
      () =>
        new Response(Bun.gzipSync(new TextEncoder().encode(offerLine(PEN, "shop-g", "5.55", Date.now()))), {
          headers: { "content-encoding": "gzip", "content-type": "application/gzip" },
        }),
    );
    const source = await addSource(store, { name: "s3-style", kind: "url", location: `${server.url}/feed.ndjson.gz`, merchants: ["shop-g"] }, Date.now());
    expect((await scheduler.runNow(source))![0]).toMatchObject({ status: "ok", offers: 1 });
  });

  test("a source already being run is not run twice at once", async () => {
    const answer = Promise.withResolvers<void>();
    const server = serve(async () => {
      await answer.promise;
      return new Response(offerLine(PEN, "shop-a", "1.00", Date.now()));
    });
    const source = await addSource(store, { name: "busy", kind: "url", location: `${server.url}/feed` }, Date.now());
    const runs = [scheduler.runNow(source), scheduler.runNow(source)];
    // The refused run answers while the other still waits for the server.
    await Promise.race(runs);
    answer.resolve();
    const [first, second] = await Promise.all(runs);
    expect([first === null, second === null].sort()).toEqual([false, true]);
    expect(server.requests.length).toBe(1);
  });
});

describe("the schedule", () => {
  test("a due source is claimed once per period; while its lease holds nobody else claims it", async () => {
    const server = serve(() => new Response(offerLine(PEN, "shop-a", "1.00", Date.now())));
    const source = await addSource(store, { name: "scheduled", kind: "url", location: `${server.url}/feed`, intervalMs: 1000 }, Date.now());
    const other = new FeedScheduler({
      ...(scheduler as unknown as { options: ConstructorParameters<typeof FeedScheduler>[0] }).options,
      owner: "other-instance",
    });
    const [runsA, runsB] = await Promise.all([scheduler.tick(), other.tick()]);
    expect(runsA.length + runsB.length).toBe(1);
    expect(server.requests.length).toBe(1);
    // Not due again until the interval has passed.
    expect([...(await scheduler.tick()), ...(await other.tick())]).toEqual([]);
    // The next run is dated by the store's clock (the database's on PostgreSQL, which a test cannot
    // move): the interval passes by moving the source's dates back by it.
    await queryRows(store, "UPDATE feed_sources SET next_run_at = next_run_at - 1000, lease_until = lease_until - 1000 WHERE id = ?", [source.id]);
    const [againA, againB] = await Promise.all([scheduler.tick(), other.tick()]);
    expect(againA.length + againB.length).toBe(1);
    expect((await store.listFeedRuns(source.id, { limit: 10 })).items.map((run) => run.trigger)).toEqual(["schedule", "schedule"]);
  });

  test("a slow source does not hold up the others: the next tick claims while it still runs", async () => {
    const asked = Promise.withResolvers<void>();
    const answer = Promise.withResolvers<void>();
    const slow = serve(async () => {
      asked.resolve();
      await answer.promise;
      return new Response(offerLine(PEN, "shop-slow", "1.00", Date.now()));
    });
    const fast = serve(() => new Response(offerLine(UPC, "shop-fast", "1.00", Date.now())));
    await addSource(store, { name: "slow", kind: "url", location: `${slow.url}/feed`, intervalMs: 60_000 }, Date.now());
    const slowRuns = scheduler.tick();
    await asked.promise;
    await addSource(store, { name: "fast", kind: "url", location: `${fast.url}/feed`, intervalMs: 60_000 }, Date.now());
    expect((await scheduler.tick()).map((run) => run.status)).toEqual(["ok"]);
    expect(slow.requests.length).toBe(1);
    answer.resolve();
    expect((await slowRuns).map((run) => run.status)).toEqual(["ok"]);
  });

  test("a source removed is no longer pulled", async () => {
    const server = serve(() => new Response(""));
    const source = await addSource(store, { name: "gone", kind: "url", location: `${server.url}/feed`, intervalMs: 1000 }, Date.now());
    await store.removeFeedSource(source.id, Date.now());
    expect(await scheduler.tick()).toEqual([]);
    expect(server.requests.length).toBe(0);
    expect((await store.listFeedSources()).map((s) => s.id)).toEqual([]);
  });
});

describe("directory sources", () => {
  let directory: string;
  beforeEach(() => {
    directory = mkdtempSync(join(tmpdir(), "feed-dir-"));
  });
  afterEach(() => rmSync(directory, { recursive: true, force: true }));

  test("each new file is imported once, oldest first; partial and hidden files are left alone; a changed file is imported again", async () => {
    const now = Date.now();
    writeFileSync(join(directory, "b.ndjson"), offerLine(PEN, "shop-b", "2.00", now));
    utimesSync(join(directory, "b.ndjson"), new Date(now - 2000), new Date(now - 2000));
    writeFileSync(join(directory, "a.csv"), `gtin,merchantId,price,currency,observedAt\n${UPC},shop-a,1.00,EUR,${new Date(now).toISOString()}\nbad,row\n`);
    writeFileSync(join(directory, "c.ndjson.tmp"), "partial");
    writeFileSync(join(directory, ".hidden"), "x");
    const source = await addSource(store, { name: "drop", kind: "directory", location: directory }, now);

    const runs = (await scheduler.runNow(source))!;
    expect(runs.map((run) => [run.file, run.status, run.offers, run.rejectedCount])).toEqual([
      ["b.ndjson", "ok", 1, 0],
      ["a.csv", "ok", 1, 1],
    ]);
    expect(runs[1]!.rejected).toEqual([{ line: 3, error: "row has 2 fields, the header has 5" }]);
    expect(await scheduler.runNow(source)).toEqual([]);
    expect((await store.getFeedSource(source.id))!.leaseOwner).toBeNull();

    writeFileSync(join(directory, "b.ndjson"), offerLine(PEN, "shop-b", "2.50", now + 1));
    expect((await scheduler.runNow(source))!.map((run) => run.file)).toEqual(["b.ndjson"]);
  });

  test("a scanned file's records for a merchant the source is not bound to are rejected and reported", async () => {
    const now = Date.now();
    writeFileSync(join(directory, "prices.ndjson"), [offerLine(PEN, "shop-x", "0.01", now), offerLine(UPC, "shop-d", "3.00", now)].join("\n"));
    const source = await addSource(store, { name: "drop", kind: "directory", location: directory, merchants: ["shop-d"] }, now);
    const [run] = (await scheduler.runNow(source))!;
    expect(run).toMatchObject({
      file: "prices.ndjson",
      offers: 1,
      rejectedCount: 1,
      rejected: [{ line: 1, error: 'merchantId: "shop-x" is not a merchant of source drop (it may write shop-d)' }],
    });
    expect(await store.findProductWithOffers(PEN)).toBeNull();
    expect((await store.findProductWithOffers(UPC))!.offers.map((offer) => offer.merchantId)).toEqual(["shop-d"]);
  });

  test("a file that vanishes between the listing and its import gives a failed run and the scan goes on", async () => {
    const now = Date.now();
    writeFileSync(join(directory, "a.ndjson"), offerLine(PEN, "shop-a", "1.00", now));
    utimesSync(join(directory, "a.ndjson"), new Date(now - 2000), new Date(now - 2000));
    writeFileSync(join(directory, "b.ndjson"), offerLine(UPC, "shop-b", "2.00", now));
    const source = await addSource(store, { name: "vanishing", kind: "directory", location: directory }, now);
    const gone = new Proxy(store, {
      get(target, property) {
        const value = Reflect.get(target, property, target);
        if (property !== "hasImportedFeedFile") return typeof value === "function" ? value.bind(target) : value;
        return async (...args: Parameters<Store["hasImportedFeedFile"]>) => {
          rmSync(join(directory, "a.ndjson"), { force: true });
          return value.apply(target, args);
        };
      },
    });
    const runs = await scanDirectorySource(gone, systemClock, source, { trigger: "manual", leaseOwner: null }, { bodyLimitBytes: 1_000_000 });
    expect(runs.map((run) => [run.file, run.status])).toEqual([
      ["a.ndjson", "failed"],
      ["b.ndjson", "ok"],
    ]);
    expect(runs[0]!.error).toStartWith("reading a.ndjson failed");
    // Gone for good or not, a passing read error is tried again at the next scan (here: nothing left to read).
    expect(await store.hasImportedFeedFile(source.id, { name: "a.ndjson", size: runs[0]!.recordsRead, modifiedAt: 0 })).toBe(false);
  });

  test("a file too large for the limit is recorded with its failed run and not read again at every scan", async () => {
    writeFileSync(join(directory, "huge.ndjson"), offerLine(PEN, "shop-a", "1.00", Date.now()).repeat(50));
    const source = await addSource(store, { name: "huge", kind: "directory", location: directory }, Date.now());
    const runs = await scanDirectorySource(store, systemClock, source, { trigger: "manual", leaseOwner: null }, { bodyLimitBytes: 100 });
    expect(runs.map((run) => [run.file, run.status])).toEqual([["huge.ndjson", "failed"]]);
    expect(runs[0]!.error).toContain("larger than the limit");
    expect(await scanDirectorySource(store, systemClock, source, { trigger: "manual", leaseOwner: null }, { bodyLimitBytes: 100 })).toEqual([]);
  });

  test("a scan whose lease another instance took stops before its next file", async () => {
    const now = Date.now();
    for (const [index, name] of ["a.ndjson", "b.ndjson", "c.ndjson"].entries()) {
      writeFileSync(join(directory, name), offerLine(PEN, `shop-${index}`, "1.00", now));
      utimesSync(join(directory, name), new Date(now - 3000 + index * 1000), new Date(now - 3000 + index * 1000));
    }
    const source = await addSource(store, { name: "shared", kind: "directory", location: directory }, now);
    expect(await store.claimFeedSource({ id: source.id, owner: "me", now, leaseMs: 60_000 })).not.toBeNull();
    let files = 0;
    const stolen = new Proxy(store, {
      get(target, property) {
        const value = Reflect.get(target, property, target);
        if (property !== "finishFeedRun") return typeof value === "function" ? value.bind(target) : value;
        return async (...args: Parameters<Store["finishFeedRun"]>) => {
          await value.apply(target, args);
          // After the first file, the lease lapses and another instance claims the source.
          if (++files === 1) {
            await target.releaseFeedLease(source.id, "me");
            await target.claimFeedSource({ id: source.id, owner: "other", now: Date.now(), leaseMs: 60_000 });
          }
        };
      },
    });
    const runs = await scanDirectorySource(
      stolen,
      systemClock,
      source,
      { trigger: "schedule", leaseOwner: "me", leaseMs: 60_000 },
      { bodyLimitBytes: 1_000_000 },
    );
    expect(runs.map((run) => run.file)).toEqual(["a.ndjson"]);
    expect((await store.getFeedSource(source.id))!.leaseOwner).toBe("other");
  });

  test("a directory that cannot be read gives a failed run", async () => {
    const source = await addSource(store, { name: "missing-dir", kind: "directory", location: join(directory, "nope") }, Date.now());
    const runs = (await scheduler.runNow(source))!;
    expect(runs).toHaveLength(1);
    expect(runs[0]!.status).toBe("failed");
    expect(runs[0]!.error).toStartWith("cannot read the directory");
  });
});
