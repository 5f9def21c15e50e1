import { encodeBase64urlNoPadding } from "@oslojs/encoding";
import type { FeedTokenCredential, FeedTokenRecord, FeedTokenScope } from "../../db/feeds/records";
import type { Store } from "../../db/store";
import { hashSecret, secretsMatch } from "../../lib/crypto";
import { newId } from "../../lib/ids";

/**
 * A feed token is `<id>.<secret>`: the id (`ftk_…`) finds the row, the secret (32 random bytes,
 * base64url) is checked against its stored SHA-256 in constant time, as Lucia does for sessions.
 * The `ftk_` prefix also keeps a customer API key (`pps_…`) from ever passing for one.
 */
const TOKEN_FORMAT = /^(ftk_[0-9a-z]{29})\.([A-Za-z0-9_-]{43})$/;

export interface CreatedFeedToken {
  token: FeedTokenRecord;
  /** The full secret, shown once. */
  clearToken: string;
}

export async function createFeedToken(
  store: Store,
  input: { scope: FeedTokenScope; sourceId: string | null; name: string; now: number },
): Promise<CreatedFeedToken> {
  const id = newId("ftk", input.now);
  const secret = encodeBase64urlNoPadding(crypto.getRandomValues(new Uint8Array(32)));
  const token = await store.insertFeedToken({
    id,
    sourceId: input.sourceId,
    scope: input.scope,
    name: input.name,
    secretHash: hashSecret(secret),
    createdAt: input.now,
  });
  return { token, clearToken: `${id}.${secret}` };
}

/** Why a presented token is refused, for the problem detail (never which part was wrong beyond this). */
export type FeedTokenRefusal = "missing" | "invalid" | "revoked";

/** The credential of a well-formed, known, unrevoked token whose secret matches; otherwise why not. */
export async function verifyFeedToken(store: Store, authorization: string | null): Promise<FeedTokenCredential | FeedTokenRefusal> {
  const match = /^Bearer +(\S+)$/i.exec(authorization?.trim() ?? "");
  if (match === null) return "missing";
  const parts = TOKEN_FORMAT.exec(match[1]!);
  if (parts === null) return "invalid";
  const credential = await store.findFeedTokenCredential(parts[1]!);
  // Hash and compare even for an unknown id, so timing does not tell known ids from unknown ones.
  const presented = hashSecret(parts[2]!);
  const isMatch = secretsMatch(presented, credential?.secretHash ?? "0".repeat(64));
  if (credential === null || !isMatch) return "invalid";
  if (credential.revokedAt !== null) return "revoked";
  return credential;
}

export function feedTokenJSON(token: FeedTokenRecord) {
  return {
    id: token.id,
    sourceId: token.sourceId,
    scope: token.scope,
    name: token.name,
    createdAt: new Date(token.createdAt).toISOString(),
    revokedAt: token.revokedAt === null ? null : new Date(token.revokedAt).toISOString(),
  };
}
