import { createRemoteJWKSet, customFetch, errors, jwtVerify, type JWTPayload } from "jose";
import type { OutboundClient } from "../../lib/outbound";
import type { Clock } from "../../lib/clock";
import type { Logger } from "../../lib/logger";
import { Problem } from "../../http/problem";

/** What the service takes from a verified ID token. */
export interface OIDCIdentity {
  /** `<iss>#<sub>`: a subject is unique only within its issuer. */
  subject: string;
  email: string | null;
  /** True only when the token's `email_verified` claim is the JSON boolean `true`. */
  emailVerified: boolean;
  name: string | null;
}

/** Turns an ID token into an identity, or throws a 401 problem (503 when the provider cannot be reached). */
export interface OIDCVerifier {
  readonly issuer: string;
  /** With `expected.nonce` (the authorization-code flow), the token's `nonce` claim must equal it. */
  verifyIDToken(idToken: string, expected?: { nonce: string }): Promise<OIDCIdentity>;
}

/** Signature algorithms accepted for ID tokens: asymmetric only, so never `none` and never HS* keyed with a public key. */
export const ALLOWED_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"];
/** Tolerated clock difference with the provider, for exp, iat and nbf. */
export const CLOCK_SKEW_SECONDS = 30;
/** An ID token is exchanged right after sign-in; an older one is refused even before it expires (narrows replay). */
export const MAX_ID_TOKEN_AGE_SECONDS = 600;

interface Discovery {
  issuer: string;
  jwksUri: URL;
  algorithms: string[];
}

const INVALID_TOKEN = {
  en: "The ID token is invalid, expired or not meant for this service.",
  fr: "Le jeton d'identité est invalide, expiré ou destiné à un autre service.",
};
const PROVIDER_DOWN = {
  en: "The identity provider cannot be reached; try again shortly.",
  fr: "Le fournisseur d'identité est injoignable ; réessayez dans un instant.",
};

function withoutTrailingSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

/**
 * Verifies ID tokens of one issuer: its discovery document (fetched once, retried after a failure),
 * its JWKS through jose (cached; fetched again when a token names an unknown `kid`, at most once per
 * `jwksCooldownMs`), the audience `clientId`, exp/iat/nbf against `clock` with a small skew.
 * Both requests go out through the outbound policy, following no redirect.
 */
export function createOIDCVerifier(options: {
  issuer: string;
  clientId: string;
  clock: Clock;
  logger: Logger;
  outbound: OutboundClient;
  jwksCooldownMs?: number;
  timeoutMs?: number;
}): OIDCVerifier {
  const { clientId, clock, logger } = options;
  const timeoutMs = options.timeoutMs ?? 5000;
  let discovery: Promise<Discovery> | null = null;
  let jwks: ReturnType<typeof createRemoteJWKSet> | null = null;

  async function discover(): Promise<Discovery> {
    const url = `${withoutTrailingSlash(options.issuer)}/.well-known/openid-configuration`;
    const response = await options.outbound.send(url, { signal: AbortSignal.timeout(timeoutMs), headers: { accept: "application/json" }, maxRedirects: 0 });
    if (!response.ok) throw new Error(`discovery answered HTTP ${response.status}`);
    const document = (await response.json()) as Record<string, unknown>;
    // The configured issuer may differ from the provider's only by a trailing slash; the token's
    // `iss` must then equal the provider's own spelling exactly.
    if (typeof document.issuer !== "string" || withoutTrailingSlash(document.issuer) !== withoutTrailingSlash(options.issuer)) {
      throw new Error("discovery document names another issuer");
    }
    if (typeof document.jwks_uri !== "string") throw new Error("discovery document has no jwks_uri");
    const advertised = Array.isArray(document.id_token_signing_alg_values_supported) ? document.id_token_signing_alg_values_supported : ["RS256"];
    const algorithms = ALLOWED_ALGORITHMS.filter((algorithm) => advertised.includes(algorithm));
    if (algorithms.length === 0) throw new Error("the provider offers no asymmetric ID token algorithm");
    return { issuer: document.issuer, jwksUri: new URL(document.jwks_uri), algorithms };
  }

  async function ready(): Promise<{ discovery: Discovery; jwks: ReturnType<typeof createRemoteJWKSet> }> {
    discovery ??= discover();
    let found: Discovery;
    try {
      found = await discovery;
    } catch (error) {
      discovery = null;
      logger.warn("OIDC discovery failed", { issuer: options.issuer, error: error instanceof Error ? error.message : String(error) });
      throw new Problem("unavailable", { detail: PROVIDER_DOWN });
    }
    jwks ??= createRemoteJWKSet(found.jwksUri, {
      timeoutDuration: timeoutMs,
      cooldownDuration: options.jwksCooldownMs ?? 30_000,
      [customFetch]: (url, { redirect: _redirect, ...init }) => options.outbound.send(url, { ...init, maxRedirects: 0 }),
    });
    return { discovery: found, jwks };
  }

  return {
    issuer: options.issuer,
    async verifyIDToken(idToken: string, expected?: { nonce: string }): Promise<OIDCIdentity> {
      const { discovery, jwks } = await ready();
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(idToken, jwks, {
          issuer: discovery.issuer,
          audience: clientId,
          algorithms: discovery.algorithms,
          clockTolerance: CLOCK_SKEW_SECONDS,
          maxTokenAge: MAX_ID_TOKEN_AGE_SECONDS,
          currentDate: new Date(clock.now()),
          requiredClaims: ["sub", "exp", "iat"],
        }));
      } catch (error) {
        // Network failures, and jose's generic errors (the JWKS endpoint answered badly), are the provider's fault, not the token's.
        if (
          !(error instanceof errors.JOSEError) ||
          error.code === "ERR_JOSE_GENERIC" ||
          error instanceof errors.JWKSTimeout ||
          error instanceof errors.JWKSInvalid
        ) {
          logger.warn("OIDC key set unavailable", { issuer: discovery.issuer, error: error instanceof Error ? error.message : String(error) });
          throw new Problem("unavailable", { detail: PROVIDER_DOWN });
        }
        // jose's codes and messages name the failed check, never the token.
        logger.info("ID token refused", { reason: error.code, check: error.message });
        throw new Problem("unauthorized", { detail: INVALID_TOKEN });
      }
      // OIDC Core 3.1.3.7: with several audiences, the token must have been issued to us (azp).
      if (Array.isArray(payload.aud) && payload.aud.length > 1 && payload.azp !== clientId) {
        logger.info("ID token refused", { reason: "azp", check: "several audiences and azp is not the client id" });
        throw new Problem("unauthorized", { detail: INVALID_TOKEN });
      }
      // OIDC Core 3.1.3.7: the nonce binds the token to the browser that started this sign-in.
      if (expected !== undefined && payload.nonce !== expected.nonce) {
        logger.info("ID token refused", { reason: "nonce", check: "the nonce claim is not the one this sign-in sent" });
        throw new Problem("unauthorized", { detail: INVALID_TOKEN });
      }
      const claims = identityClaims(payload);
      if (claims === null) {
        logger.info("ID token refused", { reason: "claim-type", check: "sub, email, email_verified, name or preferred_username has the wrong type" });
        throw new Problem("unauthorized", { detail: INVALID_TOKEN });
      }
      return { subject: `${discovery.issuer}#${claims.sub}`, email: claims.email, emailVerified: claims.emailVerified, name: claims.name };
    },
  };
}

/**
 * The identity claims of a verified token, or null when one has the wrong type: claims are read as
 * OIDC Core types them and never coerced. Only `email_verified: true` proves the email; absent, false,
 * or a string such as "true" or "false" (some providers send strings) proves nothing.
 */
export function identityClaims(payload: JWTPayload): { sub: string; email: string | null; emailVerified: boolean; name: string | null } | null {
  const optionalString = (value: unknown): string | null | undefined => {
    if (value === undefined || value === null) return null;
    if (typeof value !== "string") return undefined;
    return value.trim() === "" ? null : value.trim();
  };
  const sub = optionalString(payload.sub);
  const email = optionalString(payload.email);
  const name = optionalString(payload.name);
  const preferredUsername = optionalString(payload.preferred_username);
  const verified = payload.email_verified;
  if (sub === undefined || sub === null || email === undefined || name === undefined || preferredUsername === undefined) return null;
  if (verified !== undefined && typeof verified !== "boolean" && typeof verified !== "string") return null;
  return { sub, email, emailVerified: verified === true, name: name ?? preferredUsername };
}
