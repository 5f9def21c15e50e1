import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main } from "../../src/cli/program";

let directory: string;
let databaseUrl: string;

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-cli-"));
  databaseUrl = `sqlite:${join(directory, "cli.db")}`;
  expect(await main(["migrate", "--database-url", databaseUrl], () => {})).toBe(0);
});
afterAll(() => rmSync(directory, { recursive: true, force: true }));

/** Runs the CLI in this process and returns its exit code and printed JSON. */
async function cli(...args: string[]): Promise<{ code: number; output: any }> {
  const printed: string[] = [];
  const code = await main([...args, "--database-url", databaseUrl], (text) => printed.push(text));
  const text = printed.join("\n");
  return { code, output: args.includes("--json") ? JSON.parse(text) : text };
}

/** Runs the CLI as its own process, for exit codes and standard error. */
function spawnCLI(...args: string[]) {
  const result = Bun.spawnSync([process.execPath, "src/main.ts", ...args], { env: { ...process.env, DATABASE_URL: databaseUrl } });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

describe("operator CLI", () => {
  test("orgs create, keys create/list/revoke and credits grant/balance work together with --json", async () => {
    const org = (await cli("orgs", "create", "--name", "Acme", "--json")).output;
    expect(org).toEqual({ id: expect.stringMatching(/^org_/), name: "Acme" });

    const created = (await cli("keys", "create", "--org", org.id, "--name", "ci", "--json")).output;
    expect(created.clearKey).toMatch(/^pps_[0-9A-Za-z]{38}$/);
    expect(created.key).toMatchObject({
      name: "ci",
      status: "ACTIVE",
      keyPrefix: created.clearKey.slice(0, 8),
      createdBy: { id: "usr_system", name: "system" },
      lastUsedAt: null,
    });

    const listed = (await cli("keys", "list", "--org", org.id, "--json")).output;
    expect(listed).toHaveLength(1);
    expect(JSON.stringify(listed)).not.toContain(created.clearKey);
    expect(Object.keys(listed[0])).not.toContain("keyHash");

    const bucket = (await cli("credits", "grant", "--org", org.id, "--amount", "25", "--expires-at", "2099-01-01T00:00:00Z", "--json")).output;
    expect(bucket).toMatchObject({ id: expect.stringMatching(/^bkt_/), source: "grant", granted: 25, remaining: 25, expiresAt: "2099-01-01T00:00:00.000Z" });
    const balance = (await cli("credits", "balance", "--org", org.id, "--json")).output;
    expect(balance).toMatchObject({ available: 25, reserved: 0 });
    expect(balance.buckets).toHaveLength(1);

    const revoked = (await cli("keys", "revoke", created.key.id, "--json")).output;
    expect(revoked).toMatchObject({ id: created.key.id, status: "REVOKED" });
    expect(spawnCLI("keys", "revoke", created.key.id).code).not.toBe(0);
  });

  test("import reports read, products, offers and each rejected line by number, and keeps the good lines", async () => {
    const feed = join(directory, "feed.ndjson");
    const now = new Date().toISOString();
    writeFileSync(
      feed,
      [
        JSON.stringify({ gtin: "4006381333931", title: "Pen", merchantId: "m1", price: "1.99", currency: "EUR", observedAt: now }),
        JSON.stringify({ gtin: "4006381333932", merchantId: "m1", price: "1.99", currency: "EUR", observedAt: now }),
        "not json",
        JSON.stringify({ gtin: "96385074", title: "Product only" }),
      ].join("\n"),
    );
    const { code, output } = await cli("import", feed, "--json", "--allow-rejects");
    expect(code).toBe(0);
    expect(output).toMatchObject({ read: 4, products: 2, offers: 1 });
    expect(output.rejected.map((r: { line: number }) => r.line)).toEqual([2, 3]);
    expect(output.rejected[0].error).toContain("gtin");
  });

  test("import shows a progress line (records, offers, rejected, rate, bytes) on a terminal only, and clears it", async () => {
    const feed = join(directory, "progress.csv");
    const now = new Date().toISOString();
    const rows = Array.from({ length: 2500 }, (_, index) => `4006381333931,m${index},1.99,EUR,${now}`);
    rows[10] = "4006381333932,m1,1.99,EUR,";
    const text = ["gtin,merchantId,price,currency,observedAt", ...rows].join("\n");
    writeFileSync(feed, text);
    const terminal = (isTTY: boolean) => {
      const writes: string[] = [];
      return { writes, isTTY, write: (chunk: string) => writes.push(chunk) };
    };

    const tty = terminal(true);
    const printed: string[] = [];
    expect(
      await main(
        ["import", feed, "--allow-rejects", "--database-url", databaseUrl],
        (line) => printed.push(line),
        () => {},
        tty,
      ),
    ).toBe(0);
    // The first batch's line is drawn at once; later ones only after the redraw interval.
    // biome-ignore lint/suspicious/noControlCharactersInRegex: the progress line starts with the terminal's erase-line sequence
    expect(tty.writes[0]).toMatch(/^\r\x1b\[Kimporting: 1001 records, 1000 offers, 1 rejected, \d+ records\/s, \d+\.\d kB read$/);
    expect(tty.writes.at(-1)).toBe("\r\x1b[K");
    expect(printed.join("\n")).toStartWith("read 2500, products 1, offers 2499, rejected 1");

    const pipe = terminal(false);
    expect(
      await main(
        ["import", feed, "--allow-rejects", "--database-url", databaseUrl],
        () => {},
        () => {},
        pipe,
      ),
    ).toBe(0);
    const json = terminal(true);
    expect(
      await main(
        ["import", feed, "--allow-rejects", "--json", "--database-url", databaseUrl],
        () => {},
        () => {},
        json,
      ),
    ).toBe(0);
    expect([pipe.writes, json.writes]).toEqual([[], []]);
  });

  test("seed --demo creates an organization with credits and a working key", async () => {
    const seed = (await cli("seed", "--demo", "--products", "30", "--credits", "7", "--json")).output;
    expect(seed.clearKey).toMatch(/^pps_/);
    expect(seed.products).toBe(30);
    expect((await cli("credits", "balance", "--org", seed.organizationId, "--json")).output.available).toBe(7);
  });

  test("a failing command exits non-zero with a one-line error on standard error", () => {
    const missing = spawnCLI("keys", "create", "--name", "x");
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim().split("\n")).toHaveLength(1);
    expect(missing.stderr).toContain("--org is required");
    const unknown = spawnCLI("frobnicate");
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command");
  });

  test("invalid configuration stops with a message naming the variable", () => {
    const result = Bun.spawnSync([process.execPath, "src/main.ts", "migrate"], { env: { ...process.env, DATABASE_URL: databaseUrl, RATE_LIMIT: "lots" } });
    expect(result.exitCode).toBe(2);
    expect(result.stderr.toString()).toContain("RATE_LIMIT");
  });

  test("migrate --to refuses a target that is not a postgres:// URL as a usage error", () => {
    const result = spawnCLI("migrate", "--to", `sqlite:${join(directory, "other.db")}`);
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("--to must be a postgres:// URL");
  });

  test("--help works for the program and every command, and --version prints the version", async () => {
    const top = spawnCLI("--help");
    expect(top.code).toBe(0);
    for (const command of ["serve", "migrate", "seed", "import", "orgs", "keys", "credits"]) {
      expect(top.stdout).toContain(command);
      const help = spawnCLI(command, "--help");
      expect(help.code).toBe(0);
      expect(help.stdout).toContain("Usage:");
    }
    expect(spawnCLI("--version").stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });
});
