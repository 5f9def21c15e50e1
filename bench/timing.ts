// Latency of one operation run many times, and the app with a key, shared by the store benchmarks.
import { createApp } from "../src/app";
import { loadConfig } from "../src/config";
import type { SQLiteStore } from "../src/db/sqlite-store";
import { SYSTEM_USER_ID } from "../src/db/store";
import { systemClock } from "../src/lib/clock";
import { createLogger } from "../src/lib/logger";
import { createApiKey } from "../src/modules/keys/service";
import { createServices } from "../src/services";

function stats(samples: number[]): string {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return `p50 ${at(0.5).toFixed(2)} ms  p95 ${at(0.95).toFixed(2)} ms  p99 ${at(0.99).toFixed(2)} ms  max ${sorted[sorted.length - 1]!.toFixed(2)} ms`;
}

/** Runs `work` once to warm up, then `runs` times, and prints its latency percentiles under `label`. */
export async function time(label: string, runs: number, work: () => Promise<unknown>): Promise<void> {
  await work();
  const samples: number[] = [];
  for (let i = 0; i < runs; i++) {
    const startedAt = performance.now();
    await work();
    samples.push(performance.now() - startedAt);
  }
  console.log(`${label.padEnd(58)} ${stats(samples)}`);
}

/**
 * The whole app over `store` (a SQLite file), with an API key of `organizationId`: a GET of `path`
 * that goes through the guard, validation, store and serialization, and fails on anything but 200.
 */
export async function keyedGet(store: SQLiteStore, file: string, organizationId: string, path: string): Promise<(query: string) => Promise<unknown>> {
  const config = loadConfig({ PRICE_ENV: "production", LOG_LEVEL: "silent", DATABASE_URL: `sqlite:${file}` });
  const services = createServices({ config, store, clock: systemClock, logger: createLogger({ level: "silent" }) });
  await store.ensureSystemUser(Date.now());
  const { clearKey } = await createApiKey(store, { organizationId, name: "bench", createdBy: SYSTEM_USER_ID, keyPrefix: config.keyPrefix, now: Date.now() });
  const app = createApp(services);
  return async (query) => {
    const response = await app.handle(new Request(`http://localhost${path}${query}`, { headers: { authorization: `Bearer ${clearKey}` } }));
    if (response.status !== 200) throw new Error(`HTTP ${response.status}: ${await response.text()}`);
    return response.json();
  };
}
