// Every operator command docs/operations.md lists, run through the product (the executable, or
// `bun src/main.ts`) from a directory that is not the project's, on the database of a running
// `serve` in development mode, and checked through the server's HTTP API where it shows.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { CLIResult } from "../support/service-process";
import { TEST_DATABASE_URL } from "../support/context";
import { BINARY, developmentSignIn, feedLine, filesBesideTheProduct, jsonOf, type Service, startService } from "./harness";

const FRESH = "4006381333931";
const README_COMMANDS = ["serve", "migrate", "seed", "import", "orgs", "keys", "credits", "orders", "backup", "healthcheck"];

let service: Service;
let firstMigration: CLIResult;
/** Files the commands read or write, away from the product's directory. */
let files: string;

beforeAll(async () => {
  files = mkdtempSync(join(tmpdir(), "price-cli-files-"));
  service = await startService({
    env: { PRICE_ENV: "development" },
    async prepare(cli) {
      firstMigration = await cli(["migrate", "--json"]);
      // Any product keeps development mode from loading its demo data.
      await cli(["import", "-"], { stdin: feedLine(FRESH, { merchantId: "m-1", price: "2.50", ageMs: 60_000 }) });
    },
  });
});

afterAll(async () => {
  await service?.stop();
  rmSync(files, { recursive: true, force: true });
});

function price(gtin: string, clearKey: string): Promise<Response> {
  return service.request(`/api/v1/products/${gtin}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
}

/** A failed command: its exit code and its one-line message on standard error. */
function failure(result: CLIResult): { code: number; lines: number; stderr: string } {
  return { code: result.code, lines: result.stderr.trim().split("\n").length, stderr: result.stderr.trim() };
}

describe("the operator CLI", () => {
  test("--version prints the version, --help lists every command of the README, an unknown command exits 2 with one line", async () => {
    const version = await service.cli(["--version"]);
    expect(version).toMatchObject({ code: 0, stdout: expect.stringMatching(/^\d+\.\d+\.\d+\n$/) });
    const help = await service.cli(["--help"]);
    expect(help.code).toBe(0);
    const own = await Promise.all(README_COMMANDS.map((command) => service.cli([command, "--help"])));
    README_COMMANDS.forEach((command, index) => {
      expect(help.stdout).toContain(`\n  ${command} `);
      expect({ command, code: own[index]!.code, usage: own[index]!.stdout.includes("Usage:") }).toEqual({ command, code: 0, usage: true });
    });
    expect(failure(await service.cli(["frobnicate"]))).toEqual({
      code: 2,
      lines: 1,
      stderr: `price-service: unknown command "frobnicate"; see ${BINARY === null ? "bun src/main.ts" : "price-service"} --help`,
    });
  });

  test("migrate brings an empty database up to date, and finds nothing to do while serve runs", async () => {
    const dialect = TEST_DATABASE_URL === null ? "sqlite" : "postgres";
    expect(jsonOf(firstMigration)).toEqual({ migrated: true, dialect });
    expect(await service.cli(["migrate"])).toMatchObject({ code: 0, stdout: `database is up to date (${dialect})\n` });
  });

  test("seed --demo loads products and an organization with credits and a key, which the server bills", async () => {
    const seeded = jsonOf(await service.cli(["seed", "--demo", "--products", "20", "--credits", "50", "--json"]));
    expect(seeded.products).toBe(20);
    expect(seeded.organizationId).toStartWith("org_");
    expect(seeded.clearKey).toStartWith("pps_");
    const response = await price(seeded.freshGTIN, seeded.clearKey);
    expect(response.status).toBe(200);
    expect(((await response.json()) as any).meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1, creditsRemaining: 49 });
  });

  test("orgs create, list and add-member: the invited person joins that organization at first sign-in", async () => {
    const created = jsonOf(await service.cli(["orgs", "create", "--name", "Acme Labs", "--json"]));
    expect(Object.keys(created).sort()).toEqual(["id", "name"]);
    expect(created.id).toStartWith("org_");
    expect(created.name).toBe("Acme Labs");
    expect(jsonOf(await service.cli(["orgs", "list", "--json"])).filter((organization: { id: string }) => organization.id === created.id)).toEqual([
      { ...created, createdAt: expect.any(String) },
    ]);
    expect((await service.cli(["orgs", "list"])).stdout).toContain(`${created.id}\tAcme Labs`);
    const invited = jsonOf(await service.cli(["orgs", "add-member", "--org", created.id, "--email", "Marie@Example.com", "--json"]));
    expect(invited).toMatchObject({ email: "marie@example.com", organizationId: created.id, role: "member" });
    const { user } = await developmentSignIn(service, "marie@example.com");
    expect(user).toMatchObject({ role: "member", organization: { id: created.id, name: "Acme Labs" } });
    expect(failure(await service.cli(["orgs", "add-member", "--org", "org_missing", "--email", "x@example.com"]))).toMatchObject({ code: 2, lines: 1 });
  });

  test("credits grant and balance, keys create, list and revoke: the key is billed until it is revoked", async () => {
    const { id: organizationId } = jsonOf(await service.cli(["orgs", "create", "--name", "Keys Org", "--json"]));
    const expiresAt = new Date(Date.now() + 30 * 24 * 3_600_000).toISOString();
    const bucket = jsonOf(await service.cli(["credits", "grant", "--org", organizationId, "--amount", "30", "--expires-at", expiresAt, "--json"]));
    expect(bucket).toMatchObject({ source: "grant", granted: 30, remaining: 30, expiresAt });
    const created = jsonOf(await service.cli(["keys", "create", "--org", organizationId, "--name", "ops", "--json"]));
    expect(created.key).toMatchObject({ name: "ops", status: "ACTIVE", createdBy: { id: "usr_system", name: "system" } });
    expect((await price(FRESH, created.clearKey)).status).toBe(200);

    const balance = jsonOf(await service.cli(["credits", "balance", "--org", organizationId, "--json"]));
    expect(balance).toMatchObject({ available: 29, reserved: 0, buckets: [{ id: bucket.id, remaining: 29 }] });
    const overHTTP = await service.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${created.clearKey}` } });
    expect(await overHTTP.json()).toEqual(balance);

    const listed = await service.cli(["keys", "list", "--org", organizationId, "--json"]);
    expect(listed.stdout).not.toContain(created.clearKey);
    expect(jsonOf(listed)).toEqual([expect.objectContaining({ id: created.key.id, status: "ACTIVE", keyPrefix: created.clearKey.slice(0, 8) })]);
    expect(jsonOf(await service.cli(["keys", "revoke", created.key.id, "--json"]))).toMatchObject({ id: created.key.id, status: "REVOKED" });
    expect((await price(FRESH, created.clearKey)).status).toBe(401);
    expect(failure(await service.cli(["credits", "grant", "--org", organizationId, "--amount", "many"]))).toMatchObject({ code: 2, lines: 1 });
  });

  test("import reads an NDJSON file and CSV from standard input, writes the good records and names the bad lines", async () => {
    const feed = join(files, "feed.ndjson");
    writeFileSync(
      feed,
      [
        feedLine("96385074", { merchantId: "m-9", price: "1.25", ageMs: 1000 }),
        '{"gtin":"123","merchantId":"m-9","price":"1.00","currency":"EUR","observedAt":"2026-01-01T00:00:00Z"}',
        "not json",
      ].join("\n"),
    );
    const report = jsonOf(await service.cli(["import", feed, "--json", "--allow-rejects"]));
    expect(report).toMatchObject({ read: 3, products: 1, offers: 1 });
    expect(report.rejected.map((rejection: { line: number }) => rejection.line)).toEqual([2, 3]);

    const observedAt = new Date().toISOString();
    const csv = `gtin,title,merchantId,merchantName,price,currency,observedAt\n5901234123457,Notebook,m-7,Seven,3.40,EUR,${observedAt}\n`;
    expect(jsonOf(await service.cli(["import", "-", "--format", "csv", "--json"], { stdin: csv }))).toEqual({ read: 1, products: 1, offers: 1, rejected: [] });
    const seeded = jsonOf(await service.cli(["seed", "--demo", "--products", "1", "--credits", "5", "--json"]));
    const response = await price("5901234123457", seeded.clearKey);
    expect(response.status).toBe(200);
    expect(((await response.json()) as any).data.offers).toEqual([
      expect.objectContaining({ merchant: { id: "m-7", name: "Seven" }, price: { amount: 340, currency: "EUR", formatted: "€3.40" } }),
    ]);
  });

  test("orders list and complete: a checkout started over HTTP is completed once by the operator", async () => {
    const { cookie, user } = await developmentSignIn(service, "buyer@example.com");
    const started = await service.request("/api/v1/customer/billing/checkout/pack", {
      method: "POST",
      headers: { cookie, "content-type": "application/json" },
      body: JSON.stringify({ packId: "pack-1k" }),
    });
    expect(started.status).toBe(201);
    const { checkoutId } = (await started.json()) as { checkoutId: string };
    expect((await service.cli(["orders", "list", "--org", user.organization.id])).stdout).toContain(
      `${checkoutId}\t${user.organization.id}\tpack\tpack-1k\tpending`,
    );
    expect(jsonOf(await service.cli(["orders", "complete", checkoutId, "--json"]))).toMatchObject({ granted: true, bucket: { source: "pack", granted: 1000 } });
    expect(await service.cli(["orders", "complete", checkoutId])).toMatchObject({ code: 0, stdout: `${checkoutId} was already completed: nothing granted\n` });
    expect(jsonOf(await service.cli(["credits", "balance", "--org", user.organization.id, "--json"])).available).toBe(1000);
    expect(failure(await service.cli(["orders", "complete", "ord_missing"]))).toEqual({ code: 1, lines: 1, stderr: "price-service: No order ord_missing." });
  });

  test("backup writes a checked copy of a SQLite database while serve runs; on PostgreSQL it names pg_dump", async () => {
    const target = join(files, "backup.db");
    const result = await service.cli(["backup", target, "--json"]);
    if (TEST_DATABASE_URL !== null) {
      expect(failure(result)).toMatchObject({ code: 2, lines: 1, stderr: expect.stringContaining("pg_dump") });
      return;
    }
    const report = jsonOf(result);
    expect(report.file).toBe(target);
    expect(report.organizationsChecked).toBeGreaterThan(0);
    const copy = new Database(target, { readonly: true });
    try {
      expect(copy.query<{ count: number }, []>("SELECT count(*) AS count FROM organizations").get()!.count).toBe(report.organizationsChecked);
    } finally {
      copy.close();
    }
    expect(failure(await service.cli(["backup", target]))).toMatchObject({ code: 1, lines: 1 });
  });

  test("healthcheck exits 0 while the server answers on PORT, and 1 with one line when nothing does", async () => {
    expect(await service.cli(["healthcheck"])).toMatchObject({ code: 0, stdout: "/healthz ok\n" });
    expect(await service.cli(["healthcheck", "--ready"])).toMatchObject({ code: 0, stdout: "/readyz ok\n" });
    const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const unused = listener.port;
    listener.stop(true);
    const down = failure(await service.cli(["healthcheck", "--timeout", "500"], { env: { PORT: String(unused) } }));
    expect(down).toMatchObject({ code: 1, lines: 1, stderr: expect.stringContaining(`http://127.0.0.1:${unused}/healthz did not answer`) });
  });

  test("nothing the commands or the server did wrote a file beside the product", () => {
    expect(filesBesideTheProduct()).toEqual(BINARY === null ? [] : ["price-service"]);
  });
});
