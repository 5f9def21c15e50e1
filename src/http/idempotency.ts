import { t } from "elysia";
import { encodeBase64, decodeBase64 } from "@oslojs/encoding";
import type { Store } from "../db/store";
import { hashSecret } from "../lib/crypto";
import { Problem } from "./problem";

/** How long an answer is kept and replayed. */
export const IDEMPOTENCY_TTL_MS = 24 * 3_600_000;
/** An in-progress claim older than this belongs to a request that died; a retry may take it over. */
export const IDEMPOTENCY_ABANDONED_MS = 60_000;

export type IdempotencyStore = Pick<Store, "claimIdempotencyKey" | "completeIdempotencyKey" | "releaseIdempotencyKey">;

export interface IdempotentResponse<T = unknown> {
  status: number;
  body: T;
}

/** The `Idempotency-Key` request header, for route schemas. */
export const IdempotencyKeyHeader = t.Optional(
  t.String({
    minLength: 1,
    maxLength: 255,
    pattern: "^[\\x21-\\x7E]+$",
    description: "Any unique value (a random UUID is best) to make a retried POST safe: same key and body within 24 h → the first answer again",
  }),
);

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function canonicalJSON(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJSON).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, item]) => item !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([key, item]) => `${JSON.stringify(key)}:${canonicalJSON(item)}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

/** SHA-256 of the parsed request body in canonical JSON, so key order and whitespace do not matter. */
export function hashRequestBody(body: unknown): string {
  return hashSecret(canonicalJSON(body));
}

// The stored answer may hold a secret (a new API key), so it is encrypted with a key derived from the
// Idempotency-Key, which the database keeps only as a hash: the database alone cannot reveal it.
async function deriveKey(idempotencyKey: string, scope: string): Promise<CryptoKey> {
  const material = await crypto.subtle.importKey("raw", encoder.encode(idempotencyKey), "HKDF", false, ["deriveKey"]);
  return crypto.subtle.deriveKey(
    { name: "HKDF", hash: "SHA-256", salt: encoder.encode(scope), info: encoder.encode("price-service idempotency v1") },
    material,
    { name: "AES-GCM", length: 256 },
    false,
    ["encrypt", "decrypt"],
  );
}

async function sealBody(body: unknown, idempotencyKey: string, scope: string, keyHash: string): Promise<string> {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const sealed = await crypto.subtle.encrypt(
    { name: "AES-GCM", iv, additionalData: encoder.encode(`${scope}\n${keyHash}`) },
    await deriveKey(idempotencyKey, scope),
    encoder.encode(JSON.stringify(body)),
  );
  return `v1.${encodeBase64(iv)}.${encodeBase64(new Uint8Array(sealed))}`;
}

async function openBody(stored: string, idempotencyKey: string, scope: string, keyHash: string): Promise<unknown> {
  const [version, iv, sealed] = stored.split(".");
  if (version !== "v1" || iv === undefined || sealed === undefined) throw new Error("unknown idempotency record format");
  const plain = await crypto.subtle.decrypt(
    { name: "AES-GCM", iv: new Uint8Array(decodeBase64(iv)), additionalData: encoder.encode(`${scope}\n${keyHash}`) },
    await deriveKey(idempotencyKey, scope),
    new Uint8Array(decodeBase64(sealed)),
  );
  return JSON.parse(decoder.decode(plain));
}

const BODY_MISMATCH = {
  en: "This Idempotency-Key was already used with a different request body; use a new key for a new request.",
  fr: "Cette Idempotency-Key a déjà servi avec un autre corps de requête ; utilisez une nouvelle clé pour une nouvelle requête.",
};
const STILL_RUNNING = {
  en: "A request with this Idempotency-Key is still being processed; retry in a moment.",
  fr: "Une requête avec cette Idempotency-Key est encore en cours de traitement ; réessayez dans un instant.",
};

/**
 * Handed to `run`: lets a caller whose work ends in its own transaction (the billed look-up) seal
 * the answer and store it in that transaction, so the answer and the debit can never part.
 */
export interface IdempotencyRecorder {
  scope: string;
  keyHash: string;
  claimedAt: number;
  seal(body: unknown): Promise<string>;
}

/**
 * Runs `run` at most once per (scope, key) within 24 h. A retry with the same key and request body
 * gets the stored answer (`replayed: true`); a different body is 422; a retry while the first call
 * is still running is 409. When `run` throws, the claim is dropped and the key may be retried (or,
 * when the store cannot drop it, once the claim counts as abandoned).
 * `scope` names who and which route (e.g. organization id + route), `requestHash` comes from
 * hashRequestBody.
 */
export async function withIdempotency<T>(
  store: IdempotencyStore,
  request: { scope: string; key: string; requestHash: string; now: number },
  run: (recorder: IdempotencyRecorder) => Promise<IdempotentResponse<T> & { recorded?: boolean }>,
): Promise<IdempotentResponse<T> & { replayed: boolean }> {
  const { scope, key, requestHash, now } = request;
  const keyHash = hashSecret(key);
  const claim = await store.claimIdempotencyKey({
    scope,
    keyHash,
    requestHash,
    now,
    ttlMs: IDEMPOTENCY_TTL_MS,
    abandonAfterMs: IDEMPOTENCY_ABANDONED_MS,
  });
  if (!claim.claimed) {
    const { record } = claim;
    if (record.requestHash !== requestHash) throw new Problem("unprocessable-body", { detail: BODY_MISMATCH });
    if (record.status !== "done" || record.responseStatus === null || record.responseBody === null) {
      throw new Problem("conflict", { detail: STILL_RUNNING, headers: { "retry-after": "1" } });
    }
    const body = (await openBody(record.responseBody, key, scope, keyHash)) as T;
    return { status: record.responseStatus, body, replayed: true };
  }

  let response: IdempotentResponse<T> & { recorded?: boolean };
  try {
    response = await run({ scope, keyHash, claimedAt: claim.claimedAt, seal: (body) => sealBody(body, key, scope, keyHash) });
  } catch (error) {
    // `run`'s error is the answer (a debit in doubt must say so). A claim the store cannot release
    // now (it is away) stays in progress and is taken over once abandoned.
    await store.releaseIdempotencyKey({ scope, keyHash, claimedAt: claim.claimedAt }).catch(() => undefined);
    throw error;
  }
  if (response.recorded !== true) {
    await store.completeIdempotencyKey({
      scope,
      keyHash,
      claimedAt: claim.claimedAt,
      responseStatus: response.status,
      responseBody: await sealBody(response.body, key, scope, keyHash),
    });
  }
  return { status: response.status, body: response.body, replayed: false };
}

/**
 * A POST handler's work, made idempotent when the client sent an `Idempotency-Key` (and run as is
 * when it did not). `route` and the organization make the scope, so keys never collide across them.
 */
export async function runIdempotent<T>(
  store: IdempotencyStore,
  request: { key: string | undefined | null; organizationId: string; route: string; body: unknown; now: number },
  run: () => Promise<IdempotentResponse<T>>,
): Promise<IdempotentResponse<T> & { replayed: boolean }> {
  if (request.key === undefined || request.key === null) return { ...(await run()), replayed: false };
  return withIdempotency(
    store,
    { scope: `${request.organizationId} ${request.route}`, key: request.key, requestHash: hashRequestBody(request.body), now: request.now },
    run,
  );
}

/** Writes an idempotent result's status and replay marker onto the response. */
export function applyIdempotentResult<T>(
  set: { status?: number | string; headers: Record<string, unknown> },
  result: IdempotentResponse<T> & { replayed: boolean },
): T {
  set.status = result.status;
  if (result.replayed) set.headers["idempotent-replayed"] = "true";
  return result.body;
}
