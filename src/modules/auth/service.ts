import type { Role, Store, User } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { hashSecret } from "../../lib/crypto";
import { newId, newRandomToken } from "../../lib/ids";
import type { Logger } from "../../lib/logger";
import { Problem } from "../../http/problem";
import { splitSessionToken } from "./guard";
import type { OIDCIdentity } from "./oidc";

/** A session lives 24 h from sign-in or its last refresh… */
export const SESSION_LIFETIME_MS = 24 * 3_600_000;
/** …and cannot be refreshed past 30 days after sign-in. */
export const SESSION_MAX_LIFETIME_MS = 30 * 24 * 3_600_000;
/** Random bytes of a session secret (the part of the token after the dot). */
const SESSION_SECRET_BYTES = 32;

export interface AuthDeps {
  store: Store;
  clock: Clock;
  logger: Logger;
  trialCredits: number;
}

export interface SessionUser {
  id: string;
  email: string | null;
  name: string;
  organization: { id: string; name: string };
  role: Role;
}

/** A new session token (`<session id>.<secret>`, shown to the client once, as a cookie) and who it is for. */
export interface IssuedSession {
  token: string;
  expiresAt: number;
  user: SessionUser;
}

const NO_EMAIL = {
  en: "The identity provider did not share an email address; the `email` scope is required.",
  fr: "Le fournisseur d'identité n'a pas communiqué d'adresse e-mail ; la portée `email` est requise.",
};
const UNVERIFIED_EMAIL = {
  en: "The identity provider has not confirmed this email address as verified (its ID token must carry email_verified: true).",
  fr: "Le fournisseur d'identité n'a pas confirmé cette adresse e-mail comme vérifiée (son jeton d'identité doit porter email_verified: true).",
};
const EMAIL_TAKEN = {
  en: "This email address already belongs to another sign-in identity.",
  fr: "Cette adresse e-mail appartient déjà à une autre identité de connexion.",
};
const NO_ORGANIZATION = { en: "This user belongs to no organization.", fr: "Cet utilisateur n'appartient à aucune organisation." };
const SESSION_OVER = {
  en: "The session cannot be refreshed: it is expired, revoked, or already refreshed. Sign in again.",
  fr: "La session ne peut pas être prolongée : elle est expirée, révoquée ou déjà prolongée. Reconnectez-vous.",
};

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

export async function sessionUser(store: Store, user: User): Promise<SessionUser> {
  const organization = user.organizationId === null ? null : await store.getOrganization(user.organizationId);
  if (organization === null) throw new Problem("forbidden", { detail: NO_ORGANIZATION });
  return { id: user.id, email: user.email, name: user.name, organization: { id: organization.id, name: organization.name }, role: user.role };
}

function newSessionSecret(): string {
  return newRandomToken(SESSION_SECRET_BYTES);
}

/**
 * Signs an identity in and opens a session. The first sign-in of a subject creates its user, which
 * joins the organization that invited its email or else owns a new organization with the trial credits.
 */
export async function signIn(deps: AuthDeps, identity: OIDCIdentity, method: "oidc" | "development"): Promise<IssuedSession> {
  const { store, clock, logger } = deps;
  if (identity.email === null) throw new Problem("forbidden", { detail: NO_EMAIL });
  // Invitations and users are matched by email, so an address the provider has not asserted as
  // verified (`email_verified: true`) must never join, link or claim anything: such a sign-in is refused.
  if (!identity.emailVerified) throw new Problem("forbidden", { detail: UNVERIFIED_EMAIL });
  const email = normalizeEmail(identity.email);
  const name = identity.name ?? email.split("@")[0]!;
  const now = clock.now();

  const result = await store.signInSubject({ subject: identity.subject, email, name, newOrganizationName: name, trialCredits: deps.trialCredits, now });
  if (result.outcome === "email-taken") {
    logger.info("sign-in refused", { method, reason: "email already linked to another subject" });
    throw new Problem("conflict", { detail: EMAIL_TAKEN });
  }
  const user = await sessionUser(store, result.user);

  const id = newId("ses", now);
  const secret = newSessionSecret();
  const expiresAt = now + SESSION_LIFETIME_MS;
  await store.insertSession({
    id,
    tokenHash: hashSecret(secret),
    userId: user.id,
    createdAt: now,
    expiresAt,
    absoluteExpiresAt: now + SESSION_MAX_LIFETIME_MS,
    revokedAt: null,
  });
  logger.info("signed in", { method, outcome: result.outcome, userId: user.id, organizationId: user.organization.id, sessionId: id });
  return { token: `${id}.${secret}`, expiresAt, user };
}

/** The identity of the built-in development sign-in: the email is taken at its word. */
export function developmentIdentity(email: string): OIDCIdentity {
  return { subject: `development#${normalizeEmail(email)}`, email, emailVerified: true, name: null };
}

/**
 * Replaces the token of a live session (the presented one stops working at once) and extends it by
 * 24 h, never past 30 days after sign-in. 401 when the token was already replaced, revoked or expired.
 */
export async function refreshSession(deps: AuthDeps, input: { token: string }): Promise<IssuedSession> {
  const { store, clock, logger } = deps;
  const now = clock.now();
  const parts = splitSessionToken(input.token);
  const found = parts === null ? null : await store.findSessionWithUser(parts.sessionId);
  if (parts === null || found === null) throw new Problem("unauthorized", { detail: SESSION_OVER });
  const secret = newSessionSecret();
  const expiresAt = Math.min(now + SESSION_LIFETIME_MS, found.session.absoluteExpiresAt);
  const rotated = await store.rotateSessionToken({
    id: parts.sessionId,
    currentTokenHash: hashSecret(parts.secret),
    newTokenHash: hashSecret(secret),
    expiresAt,
    now,
  });
  if (rotated === null) throw new Problem("unauthorized", { detail: SESSION_OVER });
  logger.info("session refreshed", { userId: found.user.id, sessionId: parts.sessionId });
  return { token: `${parts.sessionId}.${secret}`, expiresAt, user: await sessionUser(store, found.user) };
}

/** Ends a session server-side; the token stops working at once. */
export async function signOut(deps: AuthDeps, input: { sessionId: string; userId: string }): Promise<void> {
  await deps.store.revokeSession(input.sessionId, deps.clock.now());
  deps.logger.info("signed out", { userId: input.userId, sessionId: input.sessionId });
}
