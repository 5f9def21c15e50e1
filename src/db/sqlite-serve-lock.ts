import { Database } from "bun:sqlite";
import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { sqlitePathFromURL } from "./sqlite-store";

export interface ServeLock {
  release(): void;
}

/**
 * One `serve` per SQLite file: its reservations are holds in its own memory, and at start-up it
 * clears every in-progress Idempotency-Key claim as left by a crash, so a second `serve` would spend
 * credits the first one holds and delete its claims. The lock is a small SQLite database beside the
 * file (`<file>-serve-lock`) written once in exclusive locking mode, which keeps its exclusive file
 * lock until the connection closes; the OS drops it when the process dies, so a crashed `serve`
 * never blocks the next start. A second `serve` fails at once (no busy wait) with a message naming
 * the file. Returns null where there is nothing to lock (PostgreSQL, an in-memory database).
 */
export function lockDatabaseForServing(databaseUrl: string): ServeLock | null {
  if (!databaseUrl.startsWith("sqlite:")) return null;
  const path = sqlitePathFromURL(databaseUrl);
  if (path === ":memory:") return null;
  mkdirSync(dirname(path), { recursive: true });
  const lock = new Database(`${path}-serve-lock`, { create: true });
  try {
    lock.exec("PRAGMA locking_mode = EXCLUSIVE");
    // The first write takes the exclusive lock, held from now on; the pid is only for the curious.
    lock.exec(`PRAGMA user_version = ${process.pid}`);
  } catch (error) {
    lock.close();
    if ((error as { code?: string }).code === "SQLITE_BUSY") {
      throw new Error(
        `another serve is already running on ${path} (it holds ${path}-serve-lock); run one serve per SQLite file, or PostgreSQL for several instances`,
      );
    }
    throw error;
  }
  return { release: () => lock.close() };
}
