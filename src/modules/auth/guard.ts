import type { Role, Store } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { hashSecret, secretsMatch } from "../../lib/crypto";
import { Problem } from "../../http/problem";
import { BEARER_CHALLENGE, checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { SESSION_CHALLENGE } from "../../http/base";

/** Who is calling: a signed-in user (session cookie) or an API key (read-only billing endpoints). */
export type Principal =
  | { kind: "session"; sessionId: string; userId: string; organizationId: string; role: Role }
  | { kind: "apiKey"; keyId: string; organizationId: string };

export const SESSION_COOKIE = "session";
const UNSAFE_METHODS = new Set(["POST", "PUT", "PATCH", "DELETE"]);

/** Session tokens are `<session id>.<secret>`; only the SHA-256 of the secret is stored. */
export function splitSessionToken(token: string): { sessionId: string; secret: string } | null {
  const dot = token.indexOf(".");
  if (dot <= 0 || dot === token.length - 1 || token.length > 200) return null;
  return { sessionId: token.slice(0, dot), secret: token.slice(dot + 1) };
}

/** Resolves a session token to its live session, or null (unknown, wrong secret, revoked, expired). */
export async function resolveSession(store: Store, token: string, now: number) {
  const parts = splitSessionToken(token);
  if (parts === null) return null;
  const found = await store.findSessionWithUser(parts.sessionId);
  if (found === null || !secretsMatch(found.session.tokenHash, hashSecret(parts.secret))) return null;
  const { session } = found;
  if (session.revokedAt !== null || session.expiresAt <= now || session.absoluteExpiresAt <= now) return null;
  return found;
}

/**
 * Refuses cookie-authenticated unsafe requests from another site: an Origin other than
 * PUBLIC_URL's, or Sec-Fetch-Site: cross-site. Requests with neither header are non-browser clients.
 */
export function assertSameOrigin(request: Request, publicUrl: string): void {
  if (!UNSAFE_METHODS.has(request.method)) return;
  const origin = request.headers.get("origin");
  const fetchSite = request.headers.get("sec-fetch-site");
  if (fetchSite === "cross-site" || (origin !== null && origin !== new URL(publicUrl).origin)) {
    throw new Problem("forbidden", {
      detail: { en: "Cross-site requests with a session cookie are refused.", fr: "Les requêtes intersites avec un cookie de session sont refusées." },
    });
  }
}

const SESSION_REQUIRED = {
  en: "Sign in first: this endpoint needs a valid session cookie.",
  fr: "Connectez-vous d'abord : cet point d'accès exige un cookie de session valide.",
};

/**
 * The principal of a request, or a 401 problem. `accept` lists the credentials the endpoint takes
 * (docs/api.md, "Which credential each endpoint takes").
 */
export async function authenticate(
  input: { request: Request; sessionToken: string | undefined; store: Store; clock: Clock; publicUrl: string; keyPrefix: string },
  accept: { session: true; apiKey: boolean },
): Promise<Principal> {
  const authorization = input.request.headers.get("authorization");
  if (accept.apiKey && authorization !== null) {
    const key = await checkBearerKey(authorization, input.store, input.keyPrefix, input.clock.now());
    if (!key.ok) throw unauthorizedKey(key.detail);
    return { kind: "apiKey", keyId: key.credential.id, organizationId: key.credential.organizationId };
  }
  const found = input.sessionToken ? await resolveSession(input.store, input.sessionToken, input.clock.now()) : null;
  if (found === null || found.user.organizationId === null) {
    // Both challenges where an API key would do as well (RFC 9110 §11.6.1 allows several).
    throw new Problem("unauthorized", {
      detail: SESSION_REQUIRED,
      headers: accept.apiKey ? { "www-authenticate": `${BEARER_CHALLENGE}, ${SESSION_CHALLENGE}` } : {},
    });
  }
  assertSameOrigin(input.request, input.publicUrl);
  return { kind: "session", sessionId: found.session.id, userId: found.user.id, organizationId: found.user.organizationId, role: found.user.role };
}
