import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { UsageError } from "../../src/cli/command";
import { main } from "../../src/cli/program";
import { feedServer, offerLine } from "../feeds/feed-helpers";
import { createTestDatabase, type TestDatabase } from "../support/context";

const PEN = "04006381333931";
let database: TestDatabase;
let directory: string;
const upstream = feedServer(() => new Response(offerLine(PEN, "shop-a", "1.99", Date.now() - 1000)));

beforeAll(async () => {
  // The upstream feed server is on loopback, which the outbound policy refuses unless allowed.
  process.env.OUTBOUND_ALLOWED_NETWORKS = "127.0.0.1/32";
  database = await createTestDatabase();
  directory = mkdtempSync(join(tmpdir(), "feeds-cli-"));
  expect(await main(["migrate", "--database-url", database.url], () => {})).toBe(0);
});
afterAll(async () => {
  delete process.env.OUTBOUND_ALLOWED_NETWORKS;
  upstream.stop();
  rmSync(directory, { recursive: true, force: true });
  await database.drop();
});

async function cli(...args: string[]): Promise<{ code: number; output: any }> {
  const printed: string[] = [];
  const code = await main([...args, "--database-url", database.url], (text) => printed.push(text));
  const text = printed.join("\n");
  return { code, output: args.includes("--json") ? JSON.parse(text) : text };
}

describe("price-service feeds and history", () => {
  test("a URL source is added, run now, listed with its freshness and its run report", async () => {
    const added = (
      await cli(
        "feeds",
        "add",
        "shop-a",
        "--url",
        `${upstream.url}/feed.ndjson`,
        "--every",
        "10m",
        "--timeout",
        "5s",
        "--retries",
        "1",
        "--merchants",
        "shop-a",
        "--json",
      )
    ).output;
    expect(added).toMatchObject({ name: "shop-a", kind: "url", intervalSeconds: 600, timeoutMs: 5000, retries: 1, lastSuccessAt: null });
    const run = await cli("feeds", "run", "shop-a", "--json");
    expect(run.code).toBe(0);
    expect(run.output).toEqual([expect.objectContaining({ trigger: "manual", status: "ok", recordsRead: 1, offers: 1 })]);
    const listed = (await cli("feeds", "list", "--json")).output;
    expect(listed.find((s: any) => s.name === "shop-a")).toMatchObject({ freshness: { offers: 1, freshOffers: 1, freshRatio: 1 }, silent: false });
    expect((await cli("feeds", "list")).output).toContain("100% of 1 offers fresh");
    expect((await cli("feeds", "runs", "shop-a", "--json")).output.map((r: any) => r.status)).toEqual(["ok"]);
  });

  test("the operator's CLI shows a source's whole URL, token in its path and query included", async () => {
    const url = "https://user:pass@feeds.example/t/PATH-TOKEN/feed.ndjson?key=QUERY-TOKEN";
    expect((await cli("feeds", "add", "tokened", "--url", url, "--json")).output.location).toBe(url);
    expect((await cli("feeds", "list", "--json")).output.find((s: any) => s.name === "tokened").location).toBe(url);
    expect((await cli("feeds", "list")).output).toContain(url);
  });

  test("a source's merchants and precedence are declared by feeds add, changed by feeds set and shown by feeds list", async () => {
    const added = (await cli("feeds", "add", "catalogue", "--push", "--merchants", "shop-c, shop-d,shop-c", "--authoritative", "--json")).output;
    expect(added).toMatchObject({ name: "catalogue", merchants: ["shop-c", "shop-d"], authoritative: true });
    expect((await cli("feeds", "add", "unbound", "--push")).output).toContain("bound to no merchant, so its offers are rejected");
    expect((await cli("feeds", "set", "catalogue", "--merchants", "shop-e", "--not-authoritative", "--json")).output).toMatchObject({
      merchants: ["shop-e"],
      authoritative: false,
    });
    expect((await cli("feeds", "set", "unbound", "--authoritative", "--json")).output).toMatchObject({ merchants: [], authoritative: true });
    const listed = (await cli("feeds", "list")).output;
    expect(listed).toMatch(/catalogue\tpush\tmerchants shop-e\tlast success/);
    expect(listed).toMatch(/unbound\tpush\tmerchants none\tauthoritative\t/);
    await expect(cli("feeds", "set", "catalogue")).rejects.toThrow("feeds set needs --merchants");
    await expect(cli("feeds", "set", "catalogue", "--authoritative", "--not-authoritative")).rejects.toThrow("not both");
    await expect(cli("feeds", "add", "long", "--push", "--merchants", "x".repeat(101))).rejects.toThrow("longer than 100 characters");
  });

  test("a directory source and the price history of what it wrote, then prune", async () => {
    writeFileSync(
      join(directory, "prices.ndjson"),
      [offerLine(PEN, "shop-d", "5.00", Date.now() - 3000), offerLine(PEN, "shop-d", "4.50", Date.now() - 2000)].join("\n"),
    );
    expect((await cli("feeds", "add", "drop", "--directory", directory, "--merchants", "shop-d", "--json")).output).toMatchObject({
      kind: "directory",
      intervalSeconds: 60,
      location: directory,
    });
    expect((await cli("feeds", "run", "drop", "--json")).output).toEqual([expect.objectContaining({ file: "prices.ndjson", offers: 2 })]);
    expect((await cli("feeds", "run", "drop", "--json")).output).toEqual([]);
    const history = (await cli("history", "show", "4006381333931", "--merchant", "shop-d", "--json")).output;
    expect(history.map((entry: any) => entry.priceAmount)).toEqual([500, 450]);
    expect((await cli("history", "prune", "--older-than", "1h", "--json")).output.deleted).toBe(0);
    // Only superseded rows go: each offer keeps its newest row, the price its next change replaces.
    expect((await cli("history", "prune", "--older-than", "1s", "--json")).output.deleted).toBe(1);
    expect((await cli("history", "show", "4006381333931", "--merchant", "shop-d", "--json")).output.map((entry: any) => entry.priceAmount)).toEqual([450]);
  });

  test("feeds run shows each file's progress line on a terminal only", async () => {
    const inbox = mkdtempSync(join(tmpdir(), "feeds-progress-"));
    try {
      writeFileSync(join(inbox, "a.ndjson"), [offerLine(PEN, "shop-p", "5.00", Date.now() - 3000), "{"].join("\n"));
      await cli("feeds", "add", "inbox", "--directory", inbox, "--merchants", "shop-p");
      const writes: string[] = [];
      expect(
        await main(
          ["feeds", "run", "inbox", "--database-url", database.url],
          () => {},
          () => {},
          { isTTY: true, write: (text: string) => writes.push(text) },
        ),
      ).toBe(0);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: the progress line starts with the terminal's erase-line sequence
      expect(writes).toEqual([expect.stringMatching(/^\r\x1b\[Kinbox a\.ndjson: 2 records, 1 offers, 1 rejected, \d+ records\/s, \d+ B read$/), "\r\x1b[K"]);

      writeFileSync(join(inbox, "b.ndjson"), offerLine(PEN, "shop-p", "4.00", Date.now() - 2000));
      const piped: string[] = [];
      expect(
        await main(
          ["feeds", "run", "inbox", "--database-url", database.url],
          () => {},
          () => {},
          { isTTY: false, write: (text: string) => piped.push(text) },
        ),
      ).toBe(0);
      expect(piped).toEqual([]);
    } finally {
      rmSync(inbox, { recursive: true, force: true });
    }
  });

  test("tokens: a push token for a push source, a read token, listed without secrets, revoked once", async () => {
    await cli("feeds", "add", "pos", "--push");
    const push = (await cli("feeds", "token", "create", "--source", "pos", "--json")).output;
    expect(push.clearToken).toMatch(/^ftk_[0-9a-z]{29}\.[A-Za-z0-9_-]{43}$/);
    expect(push.token).toMatchObject({ scope: "push", name: "pos", revokedAt: null });
    const read = (await cli("feeds", "token", "create", "--read", "--name", "grafana", "--json")).output;
    expect(read.token).toMatchObject({ scope: "read", sourceId: null });
    const listed = JSON.stringify((await cli("feeds", "token", "list", "--json")).output);
    expect(listed).not.toContain(push.clearToken.split(".")[1]);
    expect((await cli("feeds", "token", "revoke", push.token.id, "--json")).output.revokedAt).toMatch(/Z$/);
    await expect(cli("feeds", "token", "revoke", push.token.id)).rejects.toBeInstanceOf(UsageError);
  });

  test("usage errors: a duplicate name, two kinds, a push token for a URL source, a bad interval", async () => {
    await expect(cli("feeds", "add", "shop-a", "--push")).rejects.toThrow('a feed source named "shop-a" already exists');
    await expect(cli("feeds", "add", "two", "--push", "--url", "http://x")).rejects.toThrow("exactly one of");
    await expect(cli("feeds", "token", "create", "--source", "shop-a")).rejects.toThrow("push tokens are for sources added with --push");
    await expect(cli("feeds", "add", "fast", "--url", "http://x", "--every", "10ms")).rejects.toThrow("--every must be a duration");
    await expect(cli("feeds", "run", "pos")).rejects.toThrow("is a push source");
  });

  test("a removed source is gone from the list, its tokens are revoked and its name is free again", async () => {
    await cli("feeds", "add", "temp", "--push");
    const token = (await cli("feeds", "token", "create", "--source", "temp", "--json")).output;
    await cli("feeds", "remove", "temp", "--json");
    expect((await cli("feeds", "list", "--json")).output.map((s: any) => s.name)).not.toContain("temp");
    const tokens = (await cli("feeds", "token", "list", "--json")).output;
    expect(tokens.find((t: any) => t.id === token.token.id).revokedAt).toMatch(/Z$/);
    expect((await cli("feeds", "add", "temp", "--push", "--json")).output.name).toBe("temp");
  });
});
