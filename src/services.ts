import type { Config } from "./config";
import type { Store } from "./db/store";
import { SQLiteStore } from "./db/sqlite-store";
import type { Clock } from "./lib/clock";
import type { Logger } from "./lib/logger";
import Stripe from "stripe";
import { KeyUsageRecorder } from "./modules/keys/key-usage";
import { type Catalog, loadCatalog } from "./modules/billing/catalog";
import { LocalProvider } from "./modules/billing/providers/local";
import type { PaymentProvider } from "./modules/billing/providers/provider";
import { StripeProvider } from "./modules/billing/providers/stripe";

/** Everything the app needs, built once by `serve` (or a test) and passed down; nothing is global. */
export interface Services {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  keyUsage: KeyUsageRecorder;
  /** The packs and plans on sale (CATALOG_FILE or the built-in one). */
  catalog: Catalog;
  /** The payment provider chosen by BILLING_PROVIDER. */
  payments: PaymentProvider;
}

/**
 * Builds the services; throws ConfigError when CATALOG_FILE is bad. `stripe` replaces the SDK
 * client that STRIPE_SECRET_KEY would make (tests point one at a local stand-in).
 */
export function createServices(input: { config: Config; store: Store; clock: Clock; logger: Logger; stripe?: Stripe }): Services {
  const { config, store, clock, logger } = input;
  const catalog = loadCatalog(config.catalogFile);
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
  return { config, store, clock, logger, keyUsage: new KeyUsageRecorder(store, logger), catalog, payments };
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
