import type { ApiKeyRecord, Store } from "../../db/store";
import { toISO } from "../../lib/clock";
import { hashSecret } from "../../lib/crypto";
import { newId } from "../../lib/ids";
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

/** ACTIVE → ROTATED plus a new ACTIVE key of the same name; null when the key is not ACTIVE. */
export async function rotateApiKey(
  store: Store,
  input: { organizationId: string; id: string; createdBy: string; keyPrefix: string; now: number },
): Promise<CreatedKey | null> {
  const current = await store.getApiKey(input.organizationId, input.id);
  if (current === null) return null;
  const { clearKey, row } = newKeyRow({ ...input, name: current.name });
  const key = await store.rotateApiKey(input.organizationId, input.id, row);
  return key === null ? null : { key, clearKey };
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
