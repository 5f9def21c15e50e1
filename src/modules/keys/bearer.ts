import type { KeyCredential, Store } from "../../db/store";
import { toISO } from "../../lib/clock";
import { hashSecret, secretsMatch } from "../../lib/crypto";
import { Problem } from "../../http/problem";
import { isWellFormedKey } from "./key-format";

export const BEARER_CHALLENGE = 'Bearer realm="price-service"';
const UNAUTHORIZED_HEADERS = { "www-authenticate": BEARER_CHALLENGE };

export function unauthorizedKey(detail: { en: string; fr: string }, extensions: Record<string, unknown> = {}): Problem {
  return new Problem("unauthorized", { detail, extensions, headers: UNAUTHORIZED_HEADERS });
}

const MISSING = { en: "An API key is required: send Authorization: Bearer <API_KEY>.", fr: "Une clé d'API est requise : envoyez Authorization: Bearer <API_KEY>." };
const INVALID = { en: "The API key is invalid.", fr: "La clé d'API est invalide." };
const REVOKED = { en: "The API key is revoked.", fr: "La clé d'API est révoquée." };
const ROTATED = { en: "The API key was rotated; use its replacement.", fr: "La clé d'API a été renouvelée ; utilisez la nouvelle clé." };

function expired(expiresAt: number): { en: string; fr: string } {
  const when = toISO(expiresAt);
  return { en: `The API key expired at ${when}.`, fr: `La clé d'API a expiré le ${when}.` };
}

export type KeyCheck = { ok: true; credential: KeyCredential } | { ok: false; detail: { en: string; fr: string } };

/**
 * Resolves `Authorization: Bearer <key>` to an ACTIVE key. Malformed and checksum-failing keys are
 * refused before any database access; the hash look-up is followed by a constant-time comparison.
 * A key whose `expiresAt` is at or before `now` (the server clock) is refused as expired.
 */
export async function checkBearerKey(header: string | null, store: Store, keyPrefix: string, now: number): Promise<KeyCheck> {
  if (header === null || !/^Bearer /i.test(header)) return { ok: false, detail: MISSING };
  const secret = header.slice(7).trim();
  if (!isWellFormedKey(secret, keyPrefix)) return { ok: false, detail: INVALID };
  const keyHash = hashSecret(secret);
  const credential = await store.findKeyCredential(keyHash, now);
  if (credential === null || !secretsMatch(credential.keyHash, keyHash)) return { ok: false, detail: INVALID };
  if (credential.status === "REVOKED") return { ok: false, detail: REVOKED };
  if (credential.status === "ROTATED") return { ok: false, detail: ROTATED };
  if (credential.expiresAt !== null && credential.expiresAt <= now) return { ok: false, detail: expired(credential.expiresAt) };
  return { ok: true, credential };
}
