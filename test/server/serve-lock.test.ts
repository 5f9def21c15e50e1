import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Database } from "bun:sqlite";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { seedDatabase, sourcesWithPreload, spawnServe, type SeededDatabase, type ServeProcess } from "../support/service-process";

// One `serve` per SQLite file: its holds live in its memory and at start-up it clears in-progress
// Idempotency-Key claims, so a second one must refuse before it opens the database.
let directory: string;
let databasePath: string;
let databaseUrl: string;
let seed: SeededDatabase;
const serves: ServeProcess[] = [];

beforeEach(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-serve-lock-"));
  databasePath = join(directory, "service.db");
  databaseUrl = `sqlite:${databasePath}`;
  seed = await seedDatabase(databaseUrl, 10);
});

afterEach(async () => {
  for (const serve of serves.splice(0)) {
    serve.child.kill("SIGKILL");
    await serve.child.exited;
  }
  rmSync(directory, { recursive: true, force: true });
});

function inProgressClaims(): number {
  const database = new Database(databasePath, { readonly: true });
  try {
    return database.query<{ n: number }, []>("SELECT count(*) AS n FROM idempotency_records WHERE status = 'in-progress'").get()!.n;
  } finally {
    database.close();
  }
}

/** Runs `serve` to completion; one that does start is killed after 5 s (so it fails the test rather than hangs). */
async function runServe(): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = Bun.spawn([process.execPath, "src/main.ts", "serve", "--port", "0"], {
    cwd: join(import.meta.dir, "../.."),
    env: { ...process.env, DATABASE_URL: databaseUrl, PRICE_ENV: "production", LOG_LEVEL: "info" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    timeout: 5000,
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

describe("serve on a SQLite file", () => {
  test("a second serve on the same file refuses to start with one line naming the file, and leaves the first one's Idempotency-Key claim alone", async () => {
    const first = await spawnServe({ databaseUrl, target: sourcesWithPreload("./test/fixtures/slow-lookup.ts"), env: { SLOW_LOOKUP_MS: "1500" } });
    serves.push(first);
    const inFlight = fetch(`${first.url}/api/v1/products/${seed.gtin}/price`, {
      headers: { authorization: `Bearer ${seed.clearKey}`, "idempotency-key": "held-open" },
    });
    await first.waitForStderr("slow look-up started");
    expect(inProgressClaims()).toBe(1);

    const second = await runServe();
    expect(second.code).not.toBe(0);
    const lines = second.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(databasePath);
    expect(lines[0]).toContain("another serve is already running");
    expect(second.stdout).not.toContain("listening");
    expect(inProgressClaims()).toBe(1);

    const response = await inFlight;
    expect(response.status).toBe(200);
    expect(((await response.json()) as { meta: { creditsRemaining: number } }).meta.creditsRemaining).toBe(9);
    const retried = await fetch(`${first.url}/api/v1/products/${seed.gtin}/price`, {
      headers: { authorization: `Bearer ${seed.clearKey}`, "idempotency-key": "held-open" },
    });
    expect(retried.headers.get("idempotent-replayed")).toBe("true");
  });

  test("a serve killed without a chance to clean up does not block the next start", async () => {
    const crashed = await spawnServe({ databaseUrl });
    crashed.child.kill("SIGKILL");
    await crashed.child.exited;
    const next = await spawnServe({ databaseUrl });
    serves.push(next);
    expect((await fetch(`${next.url}/healthz`)).status).toBe(200);
  });

  test("a serve stopped by SIGTERM frees the file for the next one", async () => {
    const stopped = await spawnServe({ databaseUrl });
    stopped.child.kill("SIGTERM");
    expect(await stopped.child.exited).toBe(0);
    const next = await spawnServe({ databaseUrl });
    serves.push(next);
    expect((await fetch(`${next.url}/healthz`)).status).toBe(200);
  });
});
