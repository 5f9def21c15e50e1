import type { Config } from "./config";
import type { Store } from "./db/store";
import { PostgresStore } from "./db/postgres-store";
import { SQLiteStore } from "./db/sqlite-store";
import { timedStore } from "./db/timed-store";
import type { Clock } from "./lib/clock";
import type { Logger } from "./lib/logger";
import Stripe from "stripe";
import { createServiceMetrics, type ServiceMetrics } from "./lib/service-metrics";
import { KeyUsageRecorder } from "./modules/keys/key-usage";
import { UsageCounterRecorder } from "./modules/billing/usage-counters";
import { MemoryRateLimiter, type RateLimiter } from "./http/rate-limit";
import { SharedRateLimiter } from "./http/shared-rate-limit";
import { createOIDCVerifier, type OIDCVerifier } from "./modules/auth/oidc";
import { type Catalog, loadCatalog } from "./modules/billing/catalog";
import { LocalProvider } from "./modules/billing/providers/local";
import type { PaymentProvider } from "./modules/billing/providers/provider";
import { StripeProvider } from "./modules/billing/providers/stripe";
import { FeedScheduler } from "./modules/feeds/scheduler";
import { countRun } from "./modules/feeds/freshness";
import { InFlightWork } from "./lib/in-flight";
import packageJSON from "../package.json";
import { type AddressPolicy, createAddressPolicy, createOutboundClient, type OutboundClient, type ResolveHost } from "./lib/outbound";
import { WebhookDispatcher } from "./modules/webhooks/dispatcher";
import { WatchEvaluator } from "./modules/watches/evaluator";

/** Everything the app needs, built once by `serve` (or a test) and passed down; nothing is global. */
export interface Services {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  keyUsage: KeyUsageRecorder;
  /** Written-behind request counts of unbilled outcomes (the usage endpoint's counters). */
  usageCounters: UsageCounterRecorder;
  rateLimiter: RateLimiter;
  /** Verifies ID tokens of OIDC_ISSUER; null when no issuer is configured (then sign-in is development-only or off). */
  oidc: OIDCVerifier | null;
  /** The packs and plans on sale (CATALOG_FILE or the built-in one). */
  catalog: Catalog;
  /** The payment provider chosen by BILLING_PROVIDER. */
  payments: PaymentProvider;
  metrics: ServiceMetrics;
  /** Runs the scheduled feed sources (started by `serve`). */
  feeds: FeedScheduler;
  /** Price look-ups still running, which shutdown lets finish before it closes the store. */
  lookups: InFlightWork;
  /** Where the server's own requests may go (OUTBOUND_ALLOWED_NETWORKS, loopback in development). */
  outboundPolicy: AddressPolicy;
  /** Every request the server makes on its own goes through it. */
  outbound: OutboundClient;
  /** Sends the webhook outbox (started by `serve`). */
  webhooks: WebhookDispatcher;
  /** Turns offer changes of watched products into billed `price.changed` events (started by `serve`). */
  watches: WatchEvaluator;
}

/** Wires the services; the store the app sees is timed (per operation, into /metrics). */
export function createServices(input: {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  oidc?: OIDCVerifier | null;
  stripe?: Stripe;
  /** Feed pulls: the first retry pause (tests shorten it). */
  feedPull?: { retryBaseMs?: number };
  /** The outbound host resolver (tests point names at local servers). */
  outbound?: { resolve?: ResolveHost };
  /** Webhook deliveries: the time-out (tests shorten waits). */
  webhookDelivery?: { timeoutMs?: number };
}): Services {
  const { config, clock, logger } = input;
  const metrics = createServiceMetrics();
  const store = timedStore(input.store, { duration: metrics.storeDuration, errors: metrics.storeErrors });
  const catalog = loadCatalog(config.catalogFile);
  const outboundPolicy = outboundPolicyOf(config);
  const outbound = createOutboundClient({ policy: outboundPolicy, resolve: input.outbound?.resolve });
  const oidc =
    input.oidc !== undefined
      ? input.oidc
      : config.oidcIssuer !== null && config.oidcClientId !== null
        ? createOIDCVerifier({ issuer: config.oidcIssuer, clientId: config.oidcClientId, clock, logger, outbound })
        : null;
  const payments: PaymentProvider =
    config.billingProvider === "stripe"
      ? new StripeProvider({
          stripe: input.stripe ?? new Stripe(config.stripeSecretKey!, { maxNetworkRetries: 2, timeout: 15_000, appInfo: { name: "price-service" } }),
          webhookSecret: config.stripeWebhookSecret!,
          store,
          clock,
          catalog,
          logger,
        })
      : new LocalProvider({ store, publicUrl: config.publicUrl, logger });
  return {
    config,
    store,
    clock,
    logger,
    oidc,
    keyUsage: new KeyUsageRecorder(store, logger),
    usageCounters: new UsageCounterRecorder(store, logger),
    rateLimiter:
      store.sharedRateBuckets === undefined
        ? new MemoryRateLimiter(config.rateLimit.limit, config.rateLimit.windowMs)
        : new SharedRateLimiter(config.rateLimit.limit, config.rateLimit.windowMs, store.sharedRateBuckets, logger),
    catalog,
    payments,
    metrics,
    feeds: new FeedScheduler({
      store,
      clock,
      logger,
      freshnessWindowMs: config.freshnessWindowMs,
      outbound,
      sleep: (ms) => Bun.sleep(ms),
      retryBaseMs: input.feedPull?.retryBaseMs ?? 1000,
      bodyLimitBytes: config.feedBodyLimitBytes,
      userAgent: `price-service/${packageJSON.version}`,
      onRun: (source, run) => countRun(metrics, source.name, run),
    }),
    lookups: new InFlightWork(),
    outboundPolicy,
    outbound,
    webhooks: new WebhookDispatcher({ store, clock, logger, outbound, userAgent: `price-service/${packageJSON.version}`, ...input.webhookDelivery }),
    watches: new WatchEvaluator({ store, clock, logger, creditCost: config.watchEventCreditCost, freshnessWindowMs: config.freshnessWindowMs }),
  };
}

/** Where the server's own requests may go: OUTBOUND_ALLOWED_NETWORKS, and loopback in development mode. */
export function outboundPolicyOf(config: Config): AddressPolicy {
  return createAddressPolicy({ allowedNetworks: config.outboundAllowedNetworks, allowLoopback: config.env === "development" });
}

/** A command that may not create a database found none where the configuration points. */
export class MissingDatabaseError extends Error {}

/**
 * Opens the store named by DATABASE_URL and applies pending migrations. Only with `create` does a
 * missing SQLite file (and its directory) get created: a mistyped path must not look like lost data.
 */
export async function openStore(databaseUrl: string, options: { create: boolean } = { create: true }): Promise<Store> {
  if (databaseUrl.startsWith("sqlite:")) {
    const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
    if (path !== "" && path !== ":memory:") {
      const { existsSync, mkdirSync } = await import("node:fs");
      const { dirname } = await import("node:path");
      if (!options.create && !existsSync(path)) {
        throw new MissingDatabaseError(
          `no database at ${path}; run this command where "migrate" or "serve" created it, or pass --database-url sqlite:/path/to/price-service.db`,
        );
      }
      mkdirSync(dirname(path), { recursive: true });
    }
    return SQLiteStore.open(databaseUrl);
  }
  if (/^postgres(ql)?:\/\//.test(databaseUrl)) return PostgresStore.open(databaseUrl);
  throw new Error("DATABASE_URL: use sqlite:PATH or postgres://…");
}
