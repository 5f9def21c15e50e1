import type { ApiKeyRecord, Store } from "../../db/store";
import { toISO } from "../../lib/clock";
import { hashSecret } from "../../lib/crypto";
import { newId } from "../../lib/ids";
import { Problem } from "../../http/problem";
import { generateKeySecret, keyPrefixOf } from "./key-format";

export interface CreatedKey {
  key: ApiKeyRecord;
  clearKey: string;
}

function newKeyRow(input: { organizationId: string; name: string; createdBy: string; keyPrefix: string; now: number }) {
  const clearKey = generateKeySecret(input.keyPrefix);
  return {
    clearKey,
    row: {
      id: newId("key", input.now),
      organizationId: input.organizationId,
      name: input.name,
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
  input: { organizationId: string; name: string; createdBy: string; keyPrefix: string; now: number },
): Promise<CreatedKey> {
  const { clearKey, row } = newKeyRow(input);
  return { key: await store.insertApiKey(row), clearKey };
}

const KEY_NOT_FOUND = { en: "No API key with this id exists in your organization.", fr: "Aucune clé d'API avec cet identifiant n'existe dans votre organisation." };

function notActive(status: string): Problem {
  return new Problem("invalid-key-state", {
    en: `The key is ${status}; only an ACTIVE key can be rotated or revoked.`,
    fr: `La clé est ${status} ; seule une clé ACTIVE peut être renouvelée ou révoquée.`,
  });
}

/** The organization's key, or 404: a key of another organization is never revealed (no 403). */
async function keyOfOrganization(store: Store, organizationId: string, id: string): Promise<ApiKeyRecord> {
  const key = await store.getApiKey(organizationId, id);
  if (key === null) throw new Problem("not-found", KEY_NOT_FOUND);
  return key;
}

/**
 * ACTIVE → ROTATED plus a new ACTIVE key of the same name, in one store transaction: the old secret
 * stops working at once. 404 for a key outside the organization, 409 when the key is not ACTIVE.
 */
export async function rotateApiKey(
  store: Store,
  input: { organizationId: string; id: string; createdBy: string; keyPrefix: string; now: number },
): Promise<CreatedKey> {
  const current = await keyOfOrganization(store, input.organizationId, input.id);
  if (current.status !== "ACTIVE") throw notActive(current.status);
  const { clearKey, row } = newKeyRow({ ...input, name: current.name });
  const key = await store.rotateApiKey(input.organizationId, input.id, row);
  // Null here means a concurrent rotate or revoke won the race.
  if (key === null) throw notActive((await keyOfOrganization(store, input.organizationId, input.id)).status);
  return { key, clearKey };
}

/** ACTIVE → REVOKED, permanently. 404 for a key outside the organization, 409 when the key is not ACTIVE. */
export async function revokeApiKey(store: Store, input: { organizationId: string; id: string }): Promise<ApiKeyRecord> {
  const current = await keyOfOrganization(store, input.organizationId, input.id);
  if (current.status !== "ACTIVE") throw notActive(current.status);
  const revoked = await store.revokeApiKey(input.organizationId, input.id);
  if (revoked === null) throw notActive((await keyOfOrganization(store, input.organizationId, input.id)).status);
  return revoked;
}

export function keyJSON(key: ApiKeyRecord) {
  return {
    id: key.id,
    name: key.name,
    keyPrefix: key.keyPrefix,
    status: key.status,
    createdAt: toISO(key.createdAt),
    lastUsedAt: toISO(key.lastUsedAt),
    createdBy: key.createdBy,
    replacedBy: key.replacedBy,
  };
}
