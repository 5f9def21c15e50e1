import { afterEach, beforeEach, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Database } from "bun:sqlite";
import { openStore } from "../../src/services";
import { seedDatabase, spawnServe, type SeededDatabase, type ServeProcess } from "../support/service-process";

let directory: string;
let databasePath: string;
let seed: SeededDatabase;
let serve: ServeProcess | undefined;

beforeEach(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-checkpoints-"));
  databasePath = join(directory, "service.db");
  seed = await seedDatabase(`sqlite:${databasePath}`, 10);
});
afterEach(() => {
  serve?.child.kill("SIGKILL");
  rmSync(directory, { recursive: true, force: true });
});

/**
 * Frames in the WAL and frames already copied into the database file, read from the WAL index
 * (the -shm file) without touching the database: `mxFrame` of its header, `nBackfill` of its
 * checkpoint record (https://sqlite.org/walformat.html, native byte order).
 */
function walState(): { frames: number; copied: number } {
  const index = readFileSync(`${databasePath}-shm`);
  return { frames: index.readUInt32LE(16), copied: index.readUInt32LE(96) };
}

test("serve copies the WAL into the database file in the background, well before the 10 000-page automatic checkpoint", async () => {
  serve = await spawnServe({ databaseUrl: `sqlite:${databasePath}` });
  for (let index = 0; index < 5; index++) {
    const response = await fetch(`${serve.url}/api/v1/products/${seed.gtin}/price`, { headers: { authorization: `Bearer ${seed.clearKey}` } });
    expect(response.status).toBe(200);
  }
  // Five billed look-ups wrote a few dozen WAL frames: far below the automatic checkpoint, so only
  // the background checkpoint (every 200 ms) can have copied them.
  const deadline = Date.now() + 5_000;
  let state = walState();
  for (; state.copied !== state.frames && Date.now() < deadline; state = walState()) await Bun.sleep(20);
  expect(state.frames).toBeGreaterThan(0);
  expect(state.frames).toBeLessThan(10_000);
  expect(state.copied).toBe(state.frames);
});

test("every commit syncs the WAL (synchronous = FULL): an answered debit survives an OS crash or a power loss, not only a crash of the process", async () => {
  const store = await openStore(`sqlite:${databasePath}`);
  try {
    const database = (store as unknown as { database: Database }).database;
    expect(database.query<{ synchronous: number }, []>("PRAGMA synchronous").get()).toEqual({ synchronous: 2 });
    expect(database.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()).toEqual({ journal_mode: "wal" });
  } finally {
    await store.close();
  }
});
