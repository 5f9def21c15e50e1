// The browser sign-in: OpenID Connect authorization-code flow with PKCE (RFC 7636, S256) against
// OIDC_ISSUER. The service is the client; the ID token it gets back goes through the same verifier
// as POST /api/v1/auth/oidc, with the nonce this flow sent.
import { sha256 } from "@oslojs/crypto/sha2";
import { decodeBase64urlIgnorePadding, encodeBase64urlNoPadding } from "@oslojs/encoding";
import type { Logger } from "../../lib/logger";
import type { OutboundClient } from "../../lib/outbound";
import { Problem } from "../../http/problem";

/** Name of the cookie that carries a sign-in in progress from /start to /callback. */
export const PENDING_SIGN_IN_COOKIE = "oidc_sign_in";
/** A sign-in must come back from the provider within this time. */
export const PENDING_SIGN_IN_MAX_AGE_SECONDS = 600;

/** What the browser holds between /start and /callback (HttpOnly cookie); only this browser can finish the sign-in. */
export interface PendingSignIn {
  /** Echoed by the provider; binds the callback to this browser (login CSRF). */
  state: string;
  /** Must come back inside the ID token; binds the token to this sign-in (replay). */
  nonce: string;
  /** PKCE: only its SHA-256 goes to the provider, the verifier itself only to the token endpoint. */
  codeVerifier: string;
  /** The dashboard page to land on afterwards. */
  next: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function randomText(bytes: number): string {
  const random = new Uint8Array(bytes);
  crypto.getRandomValues(random);
  return encodeBase64urlNoPadding(random);
}

export function newPendingSignIn(next: string): PendingSignIn {
  return { state: randomText(24), nonce: randomText(24), codeVerifier: randomText(32), next };
}

/** The S256 code challenge of a PKCE verifier: base64url(SHA-256(verifier)). */
export function codeChallengeOf(codeVerifier: string): string {
  return encodeBase64urlNoPadding(sha256(encoder.encode(codeVerifier)));
}

export function encodePendingSignIn(pending: PendingSignIn): string {
  return encodeBase64urlNoPadding(encoder.encode(JSON.stringify(pending)));
}

/** The pending sign-in of a cookie value, or null when it is absent or not one of ours. */
export function decodePendingSignIn(value: string | undefined): PendingSignIn | null {
  if (value === undefined || value === "" || value.length > 1000) return null;
  try {
    const parsed = JSON.parse(decoder.decode(decodeBase64urlIgnorePadding(value))) as Record<string, unknown>;
    const fields = ["state", "nonce", "codeVerifier", "next"] as const;
    if (!fields.every((field) => typeof parsed[field] === "string" && parsed[field] !== "")) return null;
    return { state: parsed.state as string, nonce: parsed.nonce as string, codeVerifier: parsed.codeVerifier as string, next: parsed.next as string };
  } catch {
    return null;
  }
}

interface ProviderEndpoints {
  authorization: string;
  token: string;
  /** Client authentication at the token endpoint, when the client has a secret. */
  tokenAuthMethod: "client_secret_basic" | "client_secret_post";
}

/** The client side of the code flow: where to send the browser, and how to turn a code into an ID token. */
export interface OIDCCodeFlowClient {
  authorizationURL(pending: PendingSignIn, redirectURI: string): Promise<string>;
  /** The ID token for an authorization code; 401 when the provider refuses the code, 503 when it cannot be reached. */
  exchangeCode(code: string, pending: PendingSignIn, redirectURI: string): Promise<string>;
}

const PROVIDER_DOWN = {
  en: "The identity provider cannot be reached; try again shortly.",
  fr: "Le fournisseur d'identité est injoignable ; réessayez dans un instant.",
};
const CODE_REFUSED = { en: "The identity provider refused the sign-in code.", fr: "Le fournisseur d'identité a refusé le code de connexion." };

function withoutTrailingSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

/**
 * A confidential client when `clientSecret` is set (client_secret_basic, or client_secret_post when
 * the provider offers only that), a public client otherwise; PKCE either way. The provider's
 * endpoints come from its discovery document, fetched once (again after a failure). Requests go out
 * through the outbound policy, following no redirect.
 */
export function createOIDCCodeFlowClient(options: {
  issuer: string;
  clientId: string;
  clientSecret: string | null;
  logger: Logger;
  outbound: OutboundClient;
  timeoutMs?: number;
}): OIDCCodeFlowClient {
  const { issuer, clientId, clientSecret, logger } = options;
  const timeoutMs = options.timeoutMs ?? 5000;
  let endpoints: Promise<ProviderEndpoints> | null = null;

  async function discover(): Promise<ProviderEndpoints> {
    const response = await options.outbound.send(`${withoutTrailingSlash(issuer)}/.well-known/openid-configuration`, {
      signal: AbortSignal.timeout(timeoutMs),
      headers: { accept: "application/json" },
      maxRedirects: 0,
    });
    if (!response.ok) throw new Error(`discovery answered HTTP ${response.status}`);
    const document = (await response.json()) as Record<string, unknown>;
    if (typeof document.issuer !== "string" || withoutTrailingSlash(document.issuer) !== withoutTrailingSlash(issuer))
      throw new Error("discovery document names another issuer");
    if (typeof document.authorization_endpoint !== "string" || typeof document.token_endpoint !== "string")
      throw new Error("discovery document lacks the authorization or token endpoint");
    const methods = Array.isArray(document.token_endpoint_auth_methods_supported) ? document.token_endpoint_auth_methods_supported : ["client_secret_basic"];
    return {
      authorization: document.authorization_endpoint,
      token: document.token_endpoint,
      tokenAuthMethod: !methods.includes("client_secret_basic") && methods.includes("client_secret_post") ? "client_secret_post" : "client_secret_basic",
    };
  }

  async function ready(): Promise<ProviderEndpoints> {
    endpoints ??= discover();
    try {
      return await endpoints;
    } catch (error) {
      endpoints = null;
      logger.warn("OIDC discovery failed", { issuer, error: error instanceof Error ? error.message : String(error) });
      throw new Problem("unavailable", { detail: PROVIDER_DOWN });
    }
  }

  return {
    async authorizationURL(pending, redirectURI) {
      const url = new URL((await ready()).authorization);
      url.searchParams.set("response_type", "code");
      url.searchParams.set("client_id", clientId);
      url.searchParams.set("redirect_uri", redirectURI);
      url.searchParams.set("scope", "openid email profile");
      url.searchParams.set("state", pending.state);
      url.searchParams.set("nonce", pending.nonce);
      url.searchParams.set("code_challenge", codeChallengeOf(pending.codeVerifier));
      url.searchParams.set("code_challenge_method", "S256");
      return url.href;
    },

    async exchangeCode(code, pending, redirectURI) {
      const { token, tokenAuthMethod } = await ready();
      const form = new URLSearchParams({ grant_type: "authorization_code", code, redirect_uri: redirectURI, code_verifier: pending.codeVerifier });
      const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
      if (clientSecret === null) {
        form.set("client_id", clientId);
      } else if (tokenAuthMethod === "client_secret_post") {
        form.set("client_id", clientId);
        form.set("client_secret", clientSecret);
      } else {
        // RFC 6749 2.3.1: both parts are form-encoded before they are joined and base64-encoded.
        headers.authorization = `Basic ${btoa(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`)}`;
      }
      let response: Response;
      try {
        response = await options.outbound.send(token, { method: "POST", headers, body: form, signal: AbortSignal.timeout(timeoutMs), maxRedirects: 0 });
      } catch (error) {
        logger.warn("OIDC token endpoint unreachable", { issuer, error: error instanceof Error ? error.message : String(error) });
        throw new Problem("unavailable", { detail: PROVIDER_DOWN });
      }
      const body = (await response.json().catch(() => ({}))) as { id_token?: unknown; error?: unknown };
      if (!response.ok || typeof body.id_token !== "string") {
        // The error code names what failed (invalid_grant, invalid_client); the body never holds our secrets.
        logger.info("OIDC code refused", { issuer, status: response.status, error: typeof body.error === "string" ? body.error : "no id_token" });
        if (response.status >= 500) throw new Problem("unavailable", { detail: PROVIDER_DOWN });
        throw new Problem("unauthorized", { detail: CODE_REFUSED });
      }
      return body.id_token;
    },
  };
}
