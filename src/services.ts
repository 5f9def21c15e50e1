import type { Config } from "./config";
import type { Store } from "./db/store";
import { SQLiteStore } from "./db/sqlite-store";
import type { Clock } from "./lib/clock";
import type { Logger } from "./lib/logger";
import { KeyUsageRecorder } from "./modules/keys/key-usage";
import { MemoryRateLimiter, type RateLimiter } from "./http/rate-limit";
import { createOIDCVerifier, type OIDCVerifier } from "./modules/auth/oidc";

/** Everything the app needs, built once by `serve` (or a test) and passed down; nothing is global. */
export interface Services {
  config: Config;
  store: Store;
  clock: Clock;
  logger: Logger;
  keyUsage: KeyUsageRecorder;
  rateLimiter: RateLimiter;
  /** Verifies ID tokens of OIDC_ISSUER; null when no issuer is configured (then sign-in is development-only or off). */
  oidc: OIDCVerifier | null;
}

export function createServices(input: { config: Config; store: Store; clock: Clock; logger: Logger; oidc?: OIDCVerifier | null }): Services {
  const { config, clock, logger } = input;
  const oidc =
    input.oidc !== undefined
      ? input.oidc
      : config.oidcIssuer !== null && config.oidcClientId !== null
        ? createOIDCVerifier({ issuer: config.oidcIssuer, clientId: config.oidcClientId, clock, logger })
        : null;
  return {
    ...input,
    oidc,
    keyUsage: new KeyUsageRecorder(input.store, input.logger),
    rateLimiter: new MemoryRateLimiter(config.rateLimit.limit, config.rateLimit.windowMs),
  };
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
