import { Type } from "@sinclair/typebox";
import { Value } from "@sinclair/typebox/value";
import { resolve } from "node:path";
import { parseDuration } from "./lib/duration";
import type { LogLevel } from "./lib/logger";
import { parseNetwork } from "./lib/outbound";

const digits = (description: string) => Type.Optional(Type.String({ pattern: "^\\s*\\d+\\s*$", description }));

/** The environment variables the service reads; every value is a string, checked before it is used. */
export const EnvironmentSchema = Type.Object({
  PORT: digits("HTTP port (8080)"),
  DATABASE_URL: Type.Optional(
    Type.String({ pattern: "^(sqlite:|postgres(ql)?://)", description: "sqlite:PATH or postgres://… (sqlite:./data/price-service.db)" }),
  ),
  PUBLIC_URL: Type.Optional(Type.String({ pattern: "^https?://", description: "Public origin: links, CSRF origin check (http://localhost:PORT)" })),
  ERROR_TYPE_BASE: Type.Optional(Type.String({ pattern: "^https?://", description: "Base of problem type URIs (PUBLIC_URL/problems)" })),
  PRICE_ENV: Type.Optional(Type.Union([Type.Literal("development"), Type.Literal("production")], { description: "development or production (production)" })),
  FRESHNESS_WINDOW: Type.Optional(
    Type.String({ pattern: "^\\s*\\d+(ms|s|m|h|d)?\\s*$", description: "Offers observed within it are fresh: 90s, 15m, 24h, 7d (24h)" }),
  ),
  CREDIT_COST: digits("Credits per billed look-up (1)"),
  HISTORY_CREDIT_COST: digits("Credits per billed price history answer, each page one (2)"),
  KEY_PREFIX: Type.Optional(Type.String({ pattern: "^[a-z][a-z0-9]{0,6}_$", description: "Prefix of API key secrets (pps_)" })),
  OIDC_ISSUER: Type.Optional(
    Type.String({ pattern: "^https?://", description: "OpenID Connect issuer for dashboard sign-in (none: sign-in is off in production)" }),
  ),
  OIDC_CLIENT_ID: Type.Optional(Type.String({ description: "OpenID Connect client id" })),
  OIDC_CLIENT_SECRET: Type.Optional(Type.String({ description: "OpenID Connect client secret" })),
  BILLING_PROVIDER: Type.Optional(Type.Union([Type.Literal("local"), Type.Literal("stripe")], { description: "local or stripe (local)" })),
  STRIPE_SECRET_KEY: Type.Optional(Type.String({ description: "Stripe secret key (BILLING_PROVIDER=stripe)" })),
  STRIPE_WEBHOOK_SECRET: Type.Optional(Type.String({ description: "Stripe webhook signing secret (BILLING_PROVIDER=stripe)" })),
  CATALOG_FILE: Type.Optional(Type.String({ description: "JSON catalog of packs and plans (built-in)" })),
  TRIAL_CREDITS: digits("Credits granted to a new organization (0)"),
  RATE_LIMIT: Type.Optional(Type.String({ pattern: "^\\s*\\d+/(s|m)\\s*$", description: "Per-key rate limit on the data endpoint, N/s or N/m (100/s)" })),
  ORG_RATE_LIMIT: Type.Optional(
    Type.String({
      pattern: "^\\s*\\d+/(s|m)\\s*$",
      description: "Rate limit of all of an organization's keys together on the data endpoint, N/s or N/m (5 × RATE_LIMIT)",
    }),
  ),
  BODY_LIMIT: digits("Largest request body in bytes (1 MiB)"),
  FEED_BODY_LIMIT: digits("Largest feed body (push, pull or file) in bytes, after gzip (100 MiB)"),
  OUTBOUND_ALLOWED_NETWORKS: Type.Optional(
    Type.String({
      description:
        "Comma-separated networks (CIDR) the server's own requests (feed pulls, webhooks) may reach although private, e.g. on-premises hosts (none; development mode adds loopback)",
    }),
  ),
  WEBHOOK_ALLOWED_NETWORKS: Type.Optional(Type.String({ description: "Former name of OUTBOUND_ALLOWED_NETWORKS, read when that is not set" })),
  WATCH_LIMIT: digits("Price watches an organization may have (10000)"),
  WATCH_EVENT_CREDIT_COST: digits("Credits per price.changed event of a price watch (1)"),
  LOG_LEVEL: Type.Optional(
    Type.Union([Type.Literal("debug"), Type.Literal("info"), Type.Literal("warn"), Type.Literal("error"), Type.Literal("silent")], {
      description: "debug, info, warn, error or silent (info)",
    }),
  ),
});

export type Environment = "development" | "production";
export type BillingProviderName = "local" | "stripe";

export interface Config {
  port: number;
  databaseUrl: string;
  publicUrl: string;
  errorTypeBase: string;
  env: Environment;
  freshnessWindowMs: number;
  creditCost: number;
  /** Price watches an organization may have. */
  watchLimit: number;
  /** Credits each `price.changed` event costs. */
  watchEventCreditCost: number;
  /** Credits each billed page of a price history answer costs. */
  historyCreditCost: number;
  keyPrefix: string;
  oidcIssuer: string | null;
  oidcClientId: string | null;
  oidcClientSecret: string | null;
  billingProvider: BillingProviderName;
  stripeSecretKey: string | null;
  stripeWebhookSecret: string | null;
  catalogFile: string | null;
  trialCredits: number;
  rateLimit: { limit: number; windowMs: number };
  /** What all of an organization's keys may send together, whatever their number and rotations. */
  organizationRateLimit: { limit: number; windowMs: number };
  bodyLimitBytes: number;
  feedBodyLimitBytes: number;
  /** Private networks the server's own requests may reach (CIDR); webhooks may use plain http to them. */
  outboundAllowedNetworks: string[];
  logLevel: LogLevel;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

type Source = Record<string, string | undefined>;

function optional(source: Source, name: string): string | null {
  const value = source[name]?.trim();
  return value ? value : null;
}

function integer(source: Source, name: string, fallback: number, min: number, max: number): number {
  const raw = optional(source, name);
  if (raw === null) return fallback;
  if (!/^\d+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
    throw new ConfigError(name, `must be a whole number from ${min} to ${max}, got "${raw}"`);
  }
  return Number(raw);
}

function oneOf<T extends string>(source: Source, name: string, allowed: readonly T[], fallback: T): T {
  const raw = optional(source, name);
  if (raw === null) return fallback;
  if (!(allowed as readonly string[]).includes(raw)) throw new ConfigError(name, `must be one of ${allowed.join(", ")}, got "${raw}"`);
  return raw as T;
}

function url(name: string, raw: string): URL {
  try {
    return new URL(raw);
  } catch {
    throw new ConfigError(name, `must be an absolute URL, got "${raw}"`);
  }
}

/** ORG_RATE_LIMIT's default, in keys at RATE_LIMIT: a few keys (production, staging, a batch job) at full speed at once. */
export const ORG_RATE_LIMIT_KEYS = 5;

export function parseRateLimit(raw: string): { limit: number; windowMs: number } | null {
  const match = /^(\d+)\/(s|m)$/.exec(raw.trim());
  if (match === null || Number(match[1]) < 1) return null;
  return { limit: Number(match[1]), windowMs: match[2] === "s" ? 1000 : 60_000 };
}

function isLoopbackHost(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** Environment → typed config. Throws ConfigError naming the variable on the first bad value. */
export function loadConfig(source: Source = process.env): Config {
  const present = Object.fromEntries(Object.keys(EnvironmentSchema.properties).flatMap((name) => (source[name]?.trim() ? [[name, source[name]]] : [])));
  const firstError = Value.Errors(EnvironmentSchema, present).First();
  if (firstError !== undefined) {
    const variable = firstError.path.replace(/^\//, "");
    throw new ConfigError(variable, `${firstError.message}, got "${present[variable] ?? ""}"`);
  }
  const env = oneOf(source, "PRICE_ENV", ["development", "production"] as const, "production");
  const port = integer(source, "PORT", 8080, 0, 65535);
  const databaseUrl = absoluteSQLitePath(optional(source, "DATABASE_URL") ?? DEFAULT_DATABASE_URL);
  const publicUrl = (optional(source, "PUBLIC_URL") ?? `http://localhost:${port}`).replace(/\/+$/, "");
  url("PUBLIC_URL", publicUrl);
  const errorTypeBase = (optional(source, "ERROR_TYPE_BASE") ?? `${publicUrl}/problems`).replace(/\/+$/, "");

  const freshnessRaw = optional(source, "FRESHNESS_WINDOW") ?? "24h";
  const freshnessWindowMs = parseDuration(freshnessRaw);
  if (freshnessWindowMs === null || freshnessWindowMs <= 0) {
    throw new ConfigError("FRESHNESS_WINDOW", `must be a duration such as 24h, 90m or 3600, got "${freshnessRaw}"`);
  }

  const keyPrefix = optional(source, "KEY_PREFIX") ?? "pps_";
  if (!/^[a-z][a-z0-9]{0,6}_$/.test(keyPrefix)) {
    throw new ConfigError("KEY_PREFIX", `must be 1 to 7 lowercase letters or digits followed by "_", got "${keyPrefix}"`);
  }

  const oidcIssuer = optional(source, "OIDC_ISSUER");
  if (oidcIssuer !== null) {
    const issuer = url("OIDC_ISSUER", oidcIssuer);
    if (issuer.protocol !== "https:" && !isLoopbackHost(issuer.hostname) && env !== "development") {
      throw new ConfigError("OIDC_ISSUER", "must use https (plain http is allowed only for a loopback issuer or in development mode)");
    }
  }
  const oidcClientId = optional(source, "OIDC_CLIENT_ID");
  if (oidcIssuer !== null && oidcClientId === null) throw new ConfigError("OIDC_CLIENT_ID", "is required when OIDC_ISSUER is set");

  const billingProvider = oneOf(source, "BILLING_PROVIDER", ["local", "stripe"] as const, "local");
  const stripeSecretKey = optional(source, "STRIPE_SECRET_KEY");
  const stripeWebhookSecret = optional(source, "STRIPE_WEBHOOK_SECRET");
  if (billingProvider === "stripe" && stripeSecretKey === null) throw new ConfigError("STRIPE_SECRET_KEY", "is required when BILLING_PROVIDER=stripe");
  if (billingProvider === "stripe" && stripeWebhookSecret === null) throw new ConfigError("STRIPE_WEBHOOK_SECRET", "is required when BILLING_PROVIDER=stripe");

  const rateLimitRaw = optional(source, "RATE_LIMIT") ?? "100/s";
  const rateLimit = parseRateLimit(rateLimitRaw);
  if (rateLimit === null) throw new ConfigError("RATE_LIMIT", `must look like 100/s or 6000/m, got "${rateLimitRaw}"`);
  const organizationRateLimitRaw = optional(source, "ORG_RATE_LIMIT");
  const organizationRateLimit =
    organizationRateLimitRaw === null ? { ...rateLimit, limit: ORG_RATE_LIMIT_KEYS * rateLimit.limit } : parseRateLimit(organizationRateLimitRaw);
  if (organizationRateLimit === null) throw new ConfigError("ORG_RATE_LIMIT", `must look like 500/s or 30000/m, got "${organizationRateLimitRaw}"`);

  const networksVariable = optional(source, "OUTBOUND_ALLOWED_NETWORKS") !== null ? "OUTBOUND_ALLOWED_NETWORKS" : "WEBHOOK_ALLOWED_NETWORKS";
  const outboundAllowedNetworks = (optional(source, networksVariable) ?? "")
    .split(",")
    .map((network) => network.trim())
    .filter((network) => network !== "");
  for (const network of outboundAllowedNetworks) {
    if (parseNetwork(network) === null) throw new ConfigError(networksVariable, `must list networks such as 10.0.0.0/8 or fd00::/8, got "${network}"`);
  }

  return {
    port,
    databaseUrl,
    publicUrl,
    errorTypeBase,
    env,
    freshnessWindowMs,
    creditCost: integer(source, "CREDIT_COST", 1, 1, 1_000_000),
    watchLimit: integer(source, "WATCH_LIMIT", 10_000, 0, 10_000_000),
    watchEventCreditCost: integer(source, "WATCH_EVENT_CREDIT_COST", 1, 1, 1_000_000),
    historyCreditCost: integer(source, "HISTORY_CREDIT_COST", 2, 1, 1_000_000),
    keyPrefix,
    oidcIssuer: oidcIssuer?.replace(/\/+$/, "") ?? null,
    oidcClientId,
    oidcClientSecret: optional(source, "OIDC_CLIENT_SECRET"),
    billingProvider,
    stripeSecretKey,
    stripeWebhookSecret,
    catalogFile: optional(source, "CATALOG_FILE"),
    trialCredits: integer(source, "TRIAL_CREDITS", 0, 0, 1_000_000_000),
    rateLimit,
    organizationRateLimit,
    bodyLimitBytes: integer(source, "BODY_LIMIT", 1_048_576, 1024, 1_073_741_824),
    feedBodyLimitBytes: integer(source, "FEED_BODY_LIMIT", 104_857_600, 1024, 1_099_511_627_776),
    outboundAllowedNetworks,
    logLevel: (optional(source, "LOG_LEVEL") ?? "info") as LogLevel,
  };
}

/** The default database, relative to the working directory of the command. */
export const DEFAULT_DATABASE_URL = "sqlite:./data/price-service.db";

/**
 * One rule for where the database is: a relative sqlite: path is resolved once, against the working
 * directory, and from then on the URL names an absolute path (the one every command prints).
 */
function absoluteSQLitePath(databaseUrl: string): string {
  if (!/^(sqlite:|postgres:\/\/|postgresql:\/\/)/.test(databaseUrl)) {
    throw new ConfigError("DATABASE_URL", `must start with sqlite: or postgres://`);
  }
  if (!databaseUrl.startsWith("sqlite:")) return databaseUrl;
  const path = databaseUrl.replace(/^sqlite:(\/\/)?/, "");
  return path === "" || path === ":memory:" ? databaseUrl : `sqlite:${resolve(path)}`;
}

/** Where the database named by a URL lives, for messages: the absolute file, or the URL without its password. */
export function describeDatabase(databaseUrl: string): string {
  if (databaseUrl.startsWith("sqlite:")) return databaseUrl.replace(/^sqlite:(\/\/)?/, "");
  return databaseUrl.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");
}
