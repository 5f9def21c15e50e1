import { createApp } from "./app";
import type { Config } from "./config";
import type { Services } from "./services";
import { STALE_RESERVATION_MS } from "./db/store";

const KEY_USAGE_FLUSH_MS = 1000;
/** Unbilled requests reach the usage counters at most about this late (plus the flush's own time). */
export const USAGE_COUNTER_FLUSH_MS = 1000;
const EXPIRY_SWEEP_MS = 60_000;
const RESERVATION_SWEEP_MS = 30_000;
const RATE_LIMIT_PRUNE_MS = 60_000;
const RENEWAL_SWEEP_MS = 60_000;
/** How often an instance looks for due feed sources; a source's own interval (at least 1 s) says when it is due. */
const FEED_TICK_MS = 1000;
const FEED_SILENCE_CHECK_MS = 60_000;
/** How often an instance looks for due webhook deliveries: an event goes out about this long after its cause commits. */
const WEBHOOK_TICK_MS = 1000;
const WATCH_TICK_MS = 1000;
export { STALE_RESERVATION_MS };
const BODY_BACKSTOP_FACTOR = 4;
/** How long stop() waits for requests in flight before closing their connections: under Docker's 10 s stop timeout. */
export const SHUTDOWN_GRACE_MS = 8_000;

export interface RunningServer {
  url: string;
  port: number;
  /** Stops accepting, lets requests in flight finish, flushes written-behind state, closes the store. */
  stop(): Promise<void>;
}

/**
 * Bun.serve options. BODY_LIMIT is enforced by the app (httpBase) so a refusal is a problem; Bun's
 * own limit, past which it answers a bare 413 before the app sees the request, is only a backstop.
 */
export function listenOptions(config: Config, options: { port: number; hostname?: string }) {
  // The feed push streams bodies up to FEED_BODY_LIMIT (checked by its handler, after gzip); the backstop must let them through.
  const backstop = Math.max(config.bodyLimitBytes * BODY_BACKSTOP_FACTOR, config.feedBodyLimitBytes * 2);
  return { port: options.port, hostname: options.hostname ?? "0.0.0.0", maxRequestBodySize: backstop };
}

/** Starts the HTTP server and the periodic jobs. `serve` and the end-to-end tests both use this. */
export async function startServer(services: Services, options: { port: number; hostname?: string; shutdownGraceMs?: number }): Promise<RunningServer> {
  const { store, clock, logger, keyUsage, usageCounters, config, payments } = services;
  await store.recoverInFlightWork(clock.now());
  await store.releaseStaleReservations(clock.now());
  await payments.renewSubscriptions(clock.now());
  const checkpoints = store.startBackgroundCheckpoints();
  const app = createApp(services);
  app.listen(listenOptions(config, options));
  const server = app.server!;

  const guard = (name: string, job: () => Promise<unknown>) => () => job().catch((error: unknown) => logger.error(`${name} failed`, { error: String(error) }));
  const timers = [
    setInterval(
      guard("lastUsedAt flush", () => keyUsage.flush()),
      KEY_USAGE_FLUSH_MS,
    ),
    setInterval(
      guard("usage counter flush", () => usageCounters.flush()),
      USAGE_COUNTER_FLUSH_MS,
    ),
    setInterval(
      guard("expiry sweep", () => store.expireBuckets(clock.now())),
      EXPIRY_SWEEP_MS,
    ),
    setInterval(
      guard("reservation sweep", () => store.releaseStaleReservations(clock.now())),
      RESERVATION_SWEEP_MS,
    ),
    setInterval(
      guard("rate limit prune", async () => services.rateLimiter.prune(clock.now())),
      RATE_LIMIT_PRUNE_MS,
    ),
    setInterval(
      guard("idempotency sweep", () => store.deleteExpiredIdempotencyRecords(clock.now())),
      EXPIRY_SWEEP_MS,
    ),
    setInterval(
      guard("session sweep", () => store.deleteDeadSessions(clock.now())),
      EXPIRY_SWEEP_MS,
    ),
    setInterval(
      guard("subscription renewal", () => payments.renewSubscriptions(clock.now())),
      RENEWAL_SWEEP_MS,
    ),
    setInterval(
      guard("feed scheduler", () => services.feeds.tick()),
      FEED_TICK_MS,
    ),
    setInterval(
      guard("feed silence check", () => services.feeds.warnAboutSilentSources()),
      FEED_SILENCE_CHECK_MS,
    ),
    setInterval(
      guard("webhook delivery", () => services.webhooks.tick()),
      WEBHOOK_TICK_MS,
    ),
    setInterval(
      guard("price watch evaluation", () => services.watches.tick()),
      WATCH_TICK_MS,
    ),
  ];
  void guard("feed silence check", () => services.feeds.warnAboutSilentSources())();

  let stopping: Promise<void> | null = null;
  return {
    url: `http://${server.hostname === "0.0.0.0" ? "127.0.0.1" : server.hostname}:${server.port}`,
    port: server.port!,
    stop() {
      stopping ??= (async () => {
        for (const timer of timers) clearInterval(timer);
        let grace: Timer | undefined;
        const forced = new Promise<void>((resolve) => {
          grace = setTimeout(() => {
            logger.warn("requests still in flight after the grace period; closing their connections", {
              graceMs: options.shutdownGraceMs ?? SHUTDOWN_GRACE_MS,
            });
            server.stop(true).then(resolve, resolve);
          }, options.shutdownGraceMs ?? SHUTDOWN_GRACE_MS);
        });
        // Open connections first, then the look-ups whose clients hung up: they still hold credits.
        await Promise.race([server.stop(false).then(() => services.lookups.drain()), forced]);
        clearTimeout(grace);
        // Elysia runs afterResponse hooks (the access log) in a setImmediate after each response: let the last ones run.
        await new Promise((resolve) => setImmediate(resolve));
        await services.feeds.drain();
        await services.watches.drain();
        await services.webhooks.drain();
        await keyUsage.flush();
        await usageCounters.flush();
        logger.flush();
        await checkpoints.stop();
        await store.close();
      })();
      return stopping;
    },
  };
}
