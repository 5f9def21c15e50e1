import type { Config } from "./config";
import type { Store } from "./db/store";
import { SQLiteStore } from "./db/sqlite-store";
import { timedStore } from "./db/timed-store";
import type { Clock } from "./lib/clock";
import type { Logger } from "./lib/logger";
import { createServiceMetrics, type ServiceMetrics } from "./lib/service-metrics";
import { KeyUsageRecorder } from "./modules/keys/key-usage";

/** Everything the app needs, built once by `serve` (or a test) and passed down; nothing is global. */
export interface Services {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  keyUsage: KeyUsageRecorder;
  metrics: ServiceMetrics;
}

/** Wires the services; the store the app sees is timed (per operation, into /metrics). */
export function createServices(input: { config: Config; store: Store; clock: Clock; logger: Logger }): Services {
  const metrics = createServiceMetrics();
  const store = timedStore(input.store, { duration: metrics.storeDuration, errors: metrics.storeErrors });
  return { ...input, store, metrics, keyUsage: new KeyUsageRecorder(store, input.logger) };
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
  throw new Error("DATABASE_URL: postgres:// is not supported by this build yet");
}
