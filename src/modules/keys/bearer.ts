import { Elysia } from "elysia";
import type { KeyCredential, Store } from "../../db/store";
import type { Services } from "../../services";
import { afterAuthentication } from "../../http/authentication-first";
import { toISO } from "../../lib/clock";
import { hashSecret, secretsMatch } from "../../lib/crypto";
import { Problem } from "../../http/problem";
import { isWellFormedKey } from "./key-format";

export const BEARER_CHALLENGE = 'Bearer realm="price-service"';
const UNAUTHORIZED_HEADERS = { "www-authenticate": BEARER_CHALLENGE };

export function unauthorizedKey(detail: { en: string; fr: string }, extensions: Record<string, unknown> = {}): Problem {
  return new Problem("unauthorized", { detail, extensions, headers: UNAUTHORIZED_HEADERS });
}

const MISSING = {
  en: "An API key is required: send Authorization: Bearer <API_KEY>.",
  fr: "Une clé d'API est requise : envoyez Authorization: Bearer <API_KEY>.",
};
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

/** What a route sends with the 401 of a refused key, beside the problem and the Bearer challenge. */
export interface KeyRefusal {
  /** Headers of every answer of the route, the 401 included (the data endpoint's rate-limit policy). */
  headers: Record<string, string>;
  /** The problem's `meta` extension member. */
  meta(request: RefusedRequest): object;
}

/** The request a refusal describes, as far as it is known before authentication. */
export interface RefusedRequest {
  params: Record<string, string | undefined>;
  requestId: string;
}

type HookContext = { request: Request; params?: Record<string, string | undefined>; set: { headers: Record<string, unknown> } };

/**
 * `bearerKey: refusal` on a route resolves `key`, the ACTIVE key of `Authorization: Bearer`, or
 * answers 401 with the refusal's `meta`. The key is checked as the route's first step: while its
 * body is parsed (a route whose own parser returns first has read its body already), else when the
 * request is transformed, so before any validation, and a stranger learns nothing from either. The
 * request's deferred problems (see authentication-first.ts) are thrown right after it.
 */
export function bearerKey(services: Services) {
  const { store, clock, config } = services;
  const keys = new WeakMap<Request, KeyCredential>();
  const checkOnce = async ({ request, params, set }: HookContext, refusal: KeyRefusal): Promise<void> => {
    if (keys.has(request)) return;
    Object.assign(set.headers, refusal.headers);
    const check = await checkBearerKey(request.headers.get("authorization"), store, config.keyPrefix, clock.now());
    if (!check.ok) throw unauthorizedKey(check.detail, { meta: refusal.meta({ params: params ?? {}, requestId: String(set.headers["x-request-id"]) }) });
    keys.set(request, check.credential);
    afterAuthentication(request);
  };
  return new Elysia({ name: "keys.bearer" }).macro({
    bearerKey: (refusal: KeyRefusal) => ({
      // Returns nothing, so the route's own parser (or Elysia's) reads the body next.
      async parse(context: HookContext) {
        await checkOnce(context, refusal);
      },
      async transform(context: HookContext) {
        await checkOnce(context, refusal);
      },
      resolve({ request }: { request: Request }) {
        const key = keys.get(request);
        if (key === undefined) throw unauthorizedKey(MISSING);
        return { key };
      },
    }),
  });
}
