import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { SYSTEM_USER_ID, type Store } from "../../src/db/store";
import { Problem } from "../../src/http/problem";
import { FakeClock } from "../../src/lib/clock";
import { hashSecret } from "../../src/lib/crypto";
import { createApiKey, rotateApiKey } from "../../src/modules/keys/service";
import { openStore } from "../../src/services";
import { createTestDatabase, openTestStore } from "../support/context";

// Key state changes are conditional writes in the store, so they hold when several instances (or an
// instance and the operator CLI) act on one key at the same moment.
let store: Store;
let clock: FakeClock;
let organizationId: string;

beforeEach(async () => {
  store = await openTestStore();
  clock = new FakeClock();
  organizationId = (await store.createOrganization({ name: "Org", now: clock.now() })).id;
  await store.ensureSystemUser(clock.now());
});

afterEach(async () => {
  await store.close();
});

function newKey(target: Store = store) {
  return createApiKey(target, { organizationId, name: "k", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
}

/** The rotated key, or null when the key was not ACTIVE (the service's 409 invalid-key-state). */
async function rotate(id: string, target: Store = store) {
  try {
    return await rotateApiKey(target, { organizationId, id, createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: clock.now() });
  } catch (error) {
    if (error instanceof Problem && error.slug === "invalid-key-state") return null;
    throw error;
  }
}

describe("API key state in the store", () => {
  test("of two rotations of one key at the same moment exactly one succeeds, and the key has one replacement", async () => {
    const { key } = await newKey();
    const results = await Promise.all([rotate(key.id), rotate(key.id)]);
    const winners = results.filter((result) => result !== null);
    expect(winners).toHaveLength(1);
    expect(await store.getApiKeyById(key.id)).toMatchObject({ status: "ROTATED", replacedBy: winners[0]!.key.id });
    const listed = (await store.listApiKeys(organizationId, { limit: 10 })).items;
    expect(listed.map((k) => k.status).sort()).toEqual(["ACTIVE", "ROTATED"]);
  });

  test("a rotated key cannot be revoked and a revoked key cannot be rotated", async () => {
    const first = await newKey();
    expect(await rotate(first.key.id)).not.toBeNull();
    expect(await store.revokeApiKey(organizationId, first.key.id)).toBeNull();
    const second = await newKey();
    expect(await store.revokeApiKey(organizationId, second.key.id)).toMatchObject({ status: "REVOKED" });
    expect(await rotate(second.key.id)).toBeNull();
  });

  test("lastUsedAt only moves forward, whatever order the written-behind flushes land in", async () => {
    const { key } = await newKey();
    const now = clock.now();
    await store.touchApiKeys(new Map([[key.id, now + 5_000]]));
    await store.touchApiKeys(new Map([[key.id, now + 1_000]]));
    expect((await store.getApiKeyById(key.id))!.lastUsedAt).toBe(now + 5_000);
    await store.touchApiKeys(new Map([[key.id, now + 9_000]]));
    expect((await store.getApiKeyById(key.id))!.lastUsedAt).toBe(now + 9_000);
  });

  test("a key rotated through one connection is refused through another on its next look-up", async () => {
    const database = await createTestDatabase();
    const serving = await openStore(database.url);
    const operator = await openStore(database.url);
    try {
      organizationId = (await operator.createOrganization({ name: "Shared", now: clock.now() })).id;
      await operator.ensureSystemUser(clock.now());
      const created = await newKey(operator);
      expect(await serving.findKeyCredential(hashSecret(created.clearKey))).toMatchObject({ status: "ACTIVE" });
      const rotated = await rotate(created.key.id, operator);
      expect(await serving.findKeyCredential(hashSecret(created.clearKey))).toMatchObject({ status: "ROTATED" });
      expect(await serving.findKeyCredential(hashSecret(rotated!.clearKey))).toMatchObject({ status: "ACTIVE" });
    } finally {
      await serving.close();
      await operator.close();
      await database.drop();
    }
  });
});
