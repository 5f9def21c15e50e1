import type { ApiKeyRecord, KeyControls, Store } from "../../db/store";
import { toISO, utcMonth } from "../../lib/clock";
import { hashSecret } from "../../lib/crypto";
import { newId } from "../../lib/ids";
import { Problem } from "../../http/problem";
import { generateKeySecret, keyPrefixOf } from "./key-format";

export interface CreatedKey {
  key: ApiKeyRecord;
  clearKey: string;
}

/** What a create or PATCH body may set: ISO timestamps as given; absent fields are left as they are, null clears. */
export interface KeyControlsInput {
  expiresAt?: string | null;
  monthlyCreditLimit?: number | null;
  rateLimit?: number | null;
}

/**
 * The controls of a body, checked against the rules the schema cannot state: an expiry in the
 * future (by the server clock), a rate limit no higher than the service's own (`maxRateLimit`
 * requests per second). Either is 422 unprocessable-body naming the field.
 */
export function parseKeyControls(input: KeyControlsInput, rules: { now: number; maxRateLimit: number }): Partial<KeyControls> {
  const controls: Partial<KeyControls> = {};
  if (input.expiresAt !== undefined) {
    const expiresAt = input.expiresAt === null ? null : Date.parse(input.expiresAt);
    if (expiresAt !== null && !(expiresAt > rules.now)) {
      throw new Problem("unprocessable-body", {
        detail: {
          en: "expiresAt must be a date-time in the future (or null for no expiry).",
          fr: "expiresAt doit être une date future (ou null pour aucune expiration).",
        },
      });
    }
    controls.expiresAt = expiresAt;
  }
  if (input.monthlyCreditLimit !== undefined) controls.monthlyCreditLimit = input.monthlyCreditLimit;
  if (input.rateLimit !== undefined) {
    if (input.rateLimit !== null && input.rateLimit > rules.maxRateLimit) {
      throw new Problem("unprocessable-body", {
        detail: {
          en: `rateLimit may be at most ${rules.maxRateLimit} requests per second, the service's own limit (or null for that limit).`,
          fr: `rateLimit vaut au plus ${rules.maxRateLimit} requêtes par seconde, la limite du service (ou null pour cette limite).`,
        },
      });
    }
    controls.rateLimit = input.rateLimit;
  }
  return controls;
}

/** A new secret and what a key row stores of it; the clear secret is returned once, never stored. */
function newKeySecret(input: { organizationId: string; createdBy: string; keyPrefix: string; now: number }) {
  const clearKey = generateKeySecret(input.keyPrefix);
  return {
    clearKey,
    row: {
      id: newId("key", input.now),
      organizationId: input.organizationId,
      keyPrefix: keyPrefixOf(clearKey),
      keyHash: hashSecret(clearKey),
      createdBy: input.createdBy,
      createdAt: input.now,
    },
  };
}

/** Creates an ACTIVE key; the clear secret exists only in the return value, never in storage. */
export async function createApiKey(
  store: Store,
  input: { organizationId: string; name: string; createdBy: string; keyPrefix: string; now: number } & Partial<KeyControls>,
): Promise<CreatedKey> {
  const { clearKey, row } = newKeySecret(input);
  const controls = { expiresAt: input.expiresAt ?? null, monthlyCreditLimit: input.monthlyCreditLimit ?? null, rateLimit: input.rateLimit ?? null };
  return { key: await store.insertApiKey({ ...row, name: input.name, ...controls }), clearKey };
}

const KEY_NOT_FOUND = {
  en: "No API key with this id exists in your organization.",
  fr: "Aucune clé d'API avec cet identifiant n'existe dans votre organisation.",
};

function notActive(status: string): Problem {
  return new Problem("invalid-key-state", {
    detail: {
      en: `The key is ${status}; only an ACTIVE key can be rotated or revoked.`,
      fr: `La clé est ${status} ; seule une clé ACTIVE peut être renouvelée ou révoquée.`,
    },
  });
}

function notChangeable(status: string): Problem {
  return new Problem("invalid-key-state", {
    detail: {
      en: `The key is ${status}; only an ACTIVE key's controls can be changed.`,
      fr: `La clé est ${status} ; seuls les réglages d'une clé ACTIVE peuvent être modifiés.`,
    },
  });
}

/** The organization's key, or 404: a key of another organization is never revealed (no 403). */
async function keyOfOrganization(store: Store, organizationId: string, id: string): Promise<ApiKeyRecord> {
  const key = await store.getApiKey(organizationId, id);
  if (key === null) throw new Problem("not-found", { detail: KEY_NOT_FOUND });
  return key;
}

/**
 * ACTIVE → ROTATED plus a new ACTIVE key of the same name, in one store transaction: the old secret
 * stops working at once, and the new key takes over the controls as that transaction finds them (and,
 * in the store, the monthly spending). 404 for a key outside the organization, 409 when the key is
 * not ACTIVE (also when a concurrent rotate or revoke won the race).
 */
export async function rotateApiKey(
  store: Store,
  input: { organizationId: string; id: string; createdBy: string; keyPrefix: string; now: number },
): Promise<CreatedKey> {
  const { clearKey, row } = newKeySecret(input);
  const key = await store.rotateApiKey(input.organizationId, input.id, row);
  if (key === null) throw notActive((await keyOfOrganization(store, input.organizationId, input.id)).status);
  return { key, clearKey };
}

/** ACTIVE → REVOKED, permanently. 404 for a key outside the organization, 409 when the key is not ACTIVE. */
export async function revokeApiKey(store: Store, input: { organizationId: string; id: string; now: number }): Promise<ApiKeyRecord> {
  const current = await keyOfOrganization(store, input.organizationId, input.id);
  if (current.status !== "ACTIVE") throw notActive(current.status);
  const revoked = await store.revokeApiKey(input.organizationId, input.id, input.now);
  if (revoked === null) throw notActive((await keyOfOrganization(store, input.organizationId, input.id)).status);
  return revoked;
}

/**
 * Sets the given controls of an ACTIVE key. 404 for a key outside the organization, 409 when the
 * key is not ACTIVE (an expired key is still ACTIVE: a later expiresAt brings it back).
 */
export async function updateKeyControls(store: Store, input: { organizationId: string; id: string; controls: Partial<KeyControls> }): Promise<ApiKeyRecord> {
  const current = await keyOfOrganization(store, input.organizationId, input.id);
  if (current.status !== "ACTIVE") throw notChangeable(current.status);
  const updated = await store.updateApiKeyControls(input.organizationId, input.id, input.controls);
  if (updated === null) throw notChangeable((await keyOfOrganization(store, input.organizationId, input.id)).status);
  return updated;
}

/** The keys as the API shows them, with what each spent in `now`'s calendar month (UTC). */
export async function keysJSON(store: Store, keys: ApiKeyRecord[], now: number): Promise<Array<ReturnType<typeof keyJSON>>> {
  const spending = await store.monthlySpending(
    keys.map((key) => key.id),
    utcMonth(now),
  );
  return keys.map((key) => keyJSON(key, spending.get(key.id) ?? 0));
}

export async function oneKeyJSON(store: Store, key: ApiKeyRecord, now: number): Promise<ReturnType<typeof keyJSON>> {
  return (await keysJSON(store, [key], now))[0]!;
}

export function keyJSON(key: ApiKeyRecord, creditsSpentThisMonth: number) {
  return {
    id: key.id,
    name: key.name,
    keyPrefix: key.keyPrefix,
    status: key.status,
    createdAt: toISO(key.createdAt),
    lastUsedAt: toISO(key.lastUsedAt),
    createdBy: key.createdBy,
    replacedBy: key.replacedBy,
    expiresAt: toISO(key.expiresAt),
    monthlyCreditLimit: key.monthlyCreditLimit,
    rateLimit: key.rateLimit,
    creditsSpentThisMonth,
  };
}
