import type { Config } from "./config";
import type { Store } from "./db/store";
import { PostgresStore } from "./db/postgres-store";
import { SQLiteStore } from "./db/sqlite-store";
import type { Clock } from "./lib/clock";
import type { Logger } from "./lib/logger";
import { KeyUsageRecorder } from "./modules/keys/key-usage";

/** Everything the app needs, built once by `serve` (or a test) and passed down; nothing is global. */
export interface Services {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  keyUsage: KeyUsageRecorder;
}

export function createServices(input: { config: Config; store: Store; clock: Clock; logger: Logger }): Services {
  return { ...input, keyUsage: new KeyUsageRecorder(input.store, input.logger) };
}

/** Opens the store named by DATABASE_URL and applies pending migrations. */
export async function openStore(databaseUrl: string): Promise<Store> {
  if (databaseUrl.startsWith("sqlite:")) {
    const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
    if (path !== "" && path !== ":memory:") {
      const { mkdirSync } = await import("node:fs");
      const { dirname } = await import("node:path");
      mkdirSync(dirname(path), { recursive: true });
    }
    return SQLiteStore.open(databaseUrl);
  }
  if (/^postgres(ql)?:\/\//.test(databaseUrl)) return PostgresStore.open(databaseUrl);
  throw new Error("DATABASE_URL: use sqlite:PATH or postgres://…");
}
