import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCLI, runCLIAsync, seedDatabase, spawnServe, type SeededDatabase, type ServeProcess } from "../support/service-process";

const CREDITS = 100_000;
let directory: string;
let databaseUrl: string;
let seed: SeededDatabase;
const servers: ServeProcess[] = [];

beforeEach(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-backup-"));
  databaseUrl = `sqlite:${join(directory, "live.db")}`;
  seed = await seedDatabase(databaseUrl, CREDITS);
});
afterEach(() => {
  for (const server of servers.splice(0)) server.child.kill("SIGKILL");
  rmSync(directory, { recursive: true, force: true });
});

type LedgerRow = { id: string; type: string; amount: number; balance_after: number };

/** The ledger in creation order: the grant (made by this test), then the usage rows (made by serve, ids sort by creation). */
function ledger(path: string): LedgerRow[] {
  const database = new Database(path, { readonly: true });
  const rows = database.query<LedgerRow, []>("SELECT id, type, amount, balance_after FROM credit_transactions ORDER BY type = 'usage', id").all();
  database.close();
  return rows;
}

/** Billed look-ups from `connections` concurrent loops until stopped; counts the 200s. */
function startLoad(url: string, clearKey: string, connections = 6) {
  let running = true;
  let answered = 0;
  const loops = Array.from({ length: connections }, async () => {
    while (running) {
      const response = await fetch(`${url}/api/v1/products/${seed.gtin}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
      if (response.status !== 200) throw new Error(`look-up answered ${response.status}`);
      await response.arrayBuffer();
      answered++;
    }
  });
  return {
    answered: () => answered,
    async stop(): Promise<number> {
      running = false;
      await Promise.all(loops);
      return answered;
    },
  };
}

async function until(condition: () => boolean): Promise<void> {
  for (let waited = 0; !condition(); waited += 10) {
    if (waited > 10_000) throw new Error("load did not progress");
    await Bun.sleep(10);
  }
}

describe("price-service backup FILE", () => {
  test("a backup taken under load is a consistent snapshot that restores with the same balance, ledger and keys", async () => {
    const live = await spawnServe({ databaseUrl });
    servers.push(live);
    const load = startLoad(live.url, seed.clearKey);
    await until(() => load.answered() >= 50);
    const backupFile = join(directory, "backup.db");
    const backup = await runCLIAsync(["backup", backupFile, "--json"], { DATABASE_URL: databaseUrl });
    const duringBackup = load.answered();
    await until(() => load.answered() >= duringBackup + 50);
    const answered = await load.stop();
    live.child.kill("SIGTERM");
    expect(await live.child.exited).toBe(0);

    expect(backup.stderr).toBe("");
    expect(backup.code).toBe(0);
    const report = JSON.parse(backup.stdout);
    expect(report).toMatchObject({ file: backupFile, organizationsChecked: 1, tables: { organizations: 1, api_keys: 1, products: 1 } });
    expect(report.bytes).toBeGreaterThan(0);
    expect(readdirSync(directory).filter((name) => name.startsWith("backup.db"))).toEqual(["backup.db"]);

    // The ledger is append-only, so a consistent snapshot holds exactly a prefix of the final ledger.
    const finalLedger = ledger(join(directory, "live.db"));
    const backupLedger = ledger(backupFile);
    const usedInBackup = backupLedger.length - 1;
    expect(finalLedger.length).toBe(1 + answered);
    expect(usedInBackup).toBeGreaterThan(0);
    expect(usedInBackup).toBeLessThan(answered);
    expect(backupLedger).toEqual(finalLedger.slice(0, backupLedger.length));
    expect(backupLedger.at(-1)!.balance_after).toBe(CREDITS - usedInBackup);

    // Restore: start from the backup file as the database.
    const restoredPath = join(directory, "restored.db");
    copyFileSync(backupFile, restoredPath);
    const restoredEnv = { DATABASE_URL: `sqlite:${restoredPath}` };
    const balance = JSON.parse(runCLI(["credits", "balance", "--org", seed.organizationId, "--json"], restoredEnv).stdout);
    expect(balance).toMatchObject({ available: CREDITS - usedInBackup, reserved: 0 });
    const keys = JSON.parse(runCLI(["keys", "list", "--org", seed.organizationId, "--json"], restoredEnv).stdout);
    expect(keys).toEqual([expect.objectContaining({ id: seed.keyId, status: "ACTIVE" })]);

    const restored = await spawnServe({ databaseUrl: restoredEnv.DATABASE_URL });
    servers.push(restored);
    const response = await fetch(`${restored.url}/api/v1/products/${seed.gtin}/price`, { headers: { authorization: `Bearer ${seed.clearKey}` } });
    expect(response.status).toBe(200);
    expect(((await response.json()) as { meta: { creditsRemaining: number } }).meta.creditsRemaining).toBe(CREDITS - usedInBackup - 1);
    restored.child.kill("SIGTERM");
    expect(await restored.child.exited).toBe(0);
  }, 30_000);

  test("it refuses to overwrite an existing file", () => {
    const target = join(directory, "exists.db");
    expect(runCLI(["backup", target], { DATABASE_URL: databaseUrl }).code).toBe(0);
    const again = runCLI(["backup", target], { DATABASE_URL: databaseUrl });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("already exists");
  });

  test("it fails without creating a database when DATABASE_URL names no file", () => {
    const missing = join(directory, "missing.db");
    const result = runCLI(["backup", join(directory, "copy.db")], { DATABASE_URL: `sqlite:${missing}` });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("no database at");
    expect(existsSync(missing)).toBe(false);
    expect(existsSync(join(directory, "copy.db"))).toBe(false);
  });

  test("for a PostgreSQL DATABASE_URL it exits non-zero and says to use pg_dump, without printing the URL", () => {
    const result = runCLI(["backup", join(directory, "pg.dump")], { DATABASE_URL: "postgres://price:secret-password@db.internal/prices" });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("pg_dump");
    expect(result.stderr).not.toContain("secret-password");
    expect(result.stderr.trim().split("\n")).toHaveLength(1);
  });
});
