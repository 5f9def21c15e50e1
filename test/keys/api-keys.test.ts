import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { hashSecret } from "../../src/lib/crypto";
import { hashRequestBody, IDEMPOTENCY_TTL_MS } from "../../src/http/idempotency";
import { isWellFormedKey } from "../../src/modules/keys/key-format";
import { addProduct, createOrganization, createTestContext, json, queryRows, signIn, type TestContext, type TestSession } from "../support/context";
import { securityTests, storedText } from "../support/security";

const KEYS = "/api/v1/customer/api-keys";
const FRESH = "04006381333931";
const KEY_FIELDS = [
  "createdAt",
  "createdBy",
  "creditsSpentThisMonth",
  "expiresAt",
  "id",
  "keyPrefix",
  "lastUsedAt",
  "monthlyCreditLimit",
  "name",
  "rateLimit",
  "replacedBy",
  "status",
];

let context: TestContext;
let ada: TestSession;
let eve: TestSession;

beforeEach(async () => {
  context = await createTestContext();
  ada = await signIn(context, "ada@example.com");
  eve = await signIn(context, "eve@example.com");
});

afterEach(async () => {
  await context.close();
});

function post(path: string, session: TestSession, body?: unknown, headers: Record<string, string> = {}) {
  return context.request(path, {
    method: "POST",
    headers: { ...session.headers, ...(body === undefined ? {} : { "content-type": "application/json" }), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function createKey(session: TestSession, name = "production"): Promise<{ key: any; clearKey: string }> {
  const response = await post(KEYS, session, { name });
  expect(response.status).toBe(201);
  return json(response);
}

function list(session: TestSession, query = "") {
  return context.request(`${KEYS}${query}`, { headers: session.headers });
}

function price(clearKey: string) {
  return context.request(`/api/v1/products/${FRESH}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
}

describe("GET /api/v1/customer/api-keys", () => {
  test("a new organization has no keys", async () => {
    const response = await list(ada);
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    expect(await json(response)).toEqual({ items: [], nextCursor: null });
  });

  test("it lists the organization's keys newest first, in every state, with no secret or hash", async () => {
    const first = await createKey(ada, "first");
    const second = await createKey(ada, "second");
    await post(`${KEYS}/${first.key.id}/revoke`, ada);
    const body = await json(await list(ada));
    expect(body.items.map((key: any) => [key.name, key.status])).toEqual([
      ["second", "ACTIVE"],
      ["first", "REVOKED"],
    ]);
    for (const key of body.items) expect(Object.keys(key).sort()).toEqual(KEY_FIELDS);
    const text = JSON.stringify(body);
    for (const secret of [first.clearKey, second.clearKey]) {
      expect(text).not.toContain(secret);
      expect(text).not.toContain(hashSecret(secret));
    }
  });

  test("it pages with limit and cursor, and pages stay stable while keys are added", async () => {
    const names = ["k1", "k2", "k3", "k4", "k5"];
    for (const name of names) await createKey(ada, name);
    const first = await json(await list(ada, "?limit=2"));
    expect(first.items.map((key: any) => key.name)).toEqual(["k5", "k4"]);
    expect(first.nextCursor).toBeString();
    await createKey(ada, "k6");
    const second = await json(await list(ada, `?limit=2&cursor=${first.nextCursor}`));
    expect(second.items.map((key: any) => key.name)).toEqual(["k3", "k2"]);
    const third = await json(await list(ada, `?limit=2&cursor=${second.nextCursor}`));
    expect(third).toEqual({ items: [expect.objectContaining({ name: "k1" })], nextCursor: null });
  });

  test("keys made by the operator CLI show the built-in system user as creator", async () => {
    const org = await createOrganization(context, 0, "CLI Org");
    const cliUser = await signIn(context, "cli-org-member@example.com", { organizationId: org.organizationId });
    const body = await json(await list(cliUser));
    expect(body.items[0].createdBy).toEqual({ id: "usr_system", name: "system", email: null });
  });

  test("a limit outside 1..100 or a malformed cursor is 400 invalid-parameter", async () => {
    for (const query of ["?limit=0", "?limit=101", "?limit=abc", "?cursor=not-a-cursor"]) {
      const response = await list(ada, query);
      expect(response.status).toBe(400);
      expect((await json(response)).type).toEndWith("/invalid-parameter");
    }
  });

  test("another organization's keys are never listed", async () => {
    await createKey(eve, "eve's key");
    expect((await json(await list(ada))).items).toEqual([]);
  });

  test("members invited into an organization see its keys", async () => {
    await createKey(ada, "shared");
    const member = await signIn(context, "member@example.com", { organizationId: ada.organizationId });
    expect((await json(await list(member))).items.map((key: any) => key.name)).toEqual(["shared"]);
  });

  securityTests({ method: "GET", path: () => KEYS, accepts: "session" }, () => context);
});

describe("POST /api/v1/customer/api-keys", () => {
  test("it answers 201 with the ACTIVE key and its clear secret, which works on the data endpoint", async () => {
    await context.store.grantCredits({
      organizationId: ada.organizationId,
      source: "grant",
      type: "grant",
      amount: 3,
      expiresAt: null,
      description: "test",
      now: context.clock.now(),
    });
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]);
    const response = await post(KEYS, ada, { name: "production" });
    expect(response.status).toBe(201);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const { key, clearKey } = await json(response);
    expect(isWellFormedKey(clearKey, "pps_")).toBe(true);
    expect(key).toEqual({
      id: expect.stringMatching(/^key_/),
      name: "production",
      keyPrefix: clearKey.slice(0, 8),
      status: "ACTIVE",
      createdAt: new Date(context.clock.now()).toISOString(),
      lastUsedAt: null,
      createdBy: { id: ada.userId, name: "ada", email: "ada@example.com" },
      replacedBy: null,
      expiresAt: null,
      monthlyCreditLimit: null,
      rateLimit: null,
      creditsSpentThisMonth: 0,
    });
    expect((await price(clearKey)).status).toBe(200);
  });

  test("the name is trimmed, and must be 1 to 100 characters after trimming", async () => {
    expect((await createKey(ada, "   staging   ")).key.name).toBe("staging");
    expect((await createKey(ada, "x".repeat(100))).key.name).toHaveLength(100);
    for (const body of [{ name: "" }, { name: "    " }, { name: "x".repeat(101) }, {}, { name: 42 }]) {
      const response = await post(KEYS, ada, body);
      expect(response.status).toBe(422);
      expect((await json(response)).type).toEndWith("/unprocessable-body");
    }
    expect((await json(await list(ada))).items).toHaveLength(2);
  });

  test("a body that is not JSON is 415 or 400, and creates nothing", async () => {
    for (const framing of [{ "content-length": "6" }, { "transfer-encoding": "chunked" }] as Array<Record<string, string>>) {
      const form = await context.request(KEYS, {
        method: "POST",
        headers: { ...ada.headers, ...framing, "content-type": "application/x-www-form-urlencoded" },
        body: "name=x",
      });
      expect(form.status).toBe(415);
    }
    const broken = await context.request(KEYS, { method: "POST", headers: { ...ada.headers, "content-type": "application/json" }, body: "{" });
    expect(broken.status).toBe(400);
    expect((await json(await list(ada))).items).toEqual([]);
  });

  test("the database keeps only the SHA-256 of the secret", async () => {
    const { key, clearKey } = await createKey(ada);
    const credential = await context.store.findKeyCredential(hashSecret(clearKey));
    expect(credential?.id).toBe(key.id);
    expect(await storedText(context)).not.toContain(clearKey);
  });

  describe("with an Idempotency-Key", () => {
    const scopeOf = (session: TestSession) => `${session.organizationId} POST /api/v1/customer/api-keys`;

    test("a retry with the same key and body replays the first answer: same clearKey, no second key", async () => {
      const first = await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "8e0f3c7a-retry-1" });
      expect(first.status).toBe(201);
      expect(first.headers.get("idempotent-replayed")).toBeNull();
      const retry = await post(KEYS, ada, { name: "  ci " }, { "idempotency-key": "8e0f3c7a-retry-1" });
      expect(retry.status).toBe(201);
      expect(retry.headers.get("idempotent-replayed")).toBe("true");
      expect(await json(retry)).toEqual(await json(first));
      expect((await json(await list(ada))).items).toHaveLength(1);
    });

    test("the same key with another body is 422 and creates nothing", async () => {
      await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "key-a" });
      const response = await post(KEYS, ada, { name: "other" }, { "idempotency-key": "key-a" });
      expect(response.status).toBe(422);
      expect((await json(response)).detail).toContain("different request body");
      expect((await json(await list(ada))).items).toHaveLength(1);
    });

    test("the same key while the first request is still running is 409 with Retry-After", async () => {
      // The first request holds the claim (as it would between its start and its answer).
      await context.store.claimIdempotencyKey({
        scope: scopeOf(ada),
        keyHash: hashSecret("key-running"),
        requestHash: hashRequestBody({ name: "ci" }),
        now: context.clock.now(),
        ttlMs: IDEMPOTENCY_TTL_MS,
        abandonAfterMs: 60_000,
      });
      const response = await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "key-running" });
      expect(response.status).toBe(409);
      expect(response.headers.get("retry-after")).toBe("1");
      expect((await json(response)).type).toEndWith("/conflict");
      expect((await json(await list(ada))).items).toHaveLength(0);
    });

    test("different keys create different keys, and one key is scoped to its organization", async () => {
      const a = await json(await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "shared-key" }));
      const b = await json(await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "another-key" }));
      const e = await json(await post(KEYS, eve, { name: "ci" }, { "idempotency-key": "shared-key" }));
      expect(new Set([a.clearKey, b.clearKey, e.clearKey]).size).toBe(3);
      expect(e.key.createdBy.id).toBe(eve.userId);
    });

    test("after 24 h the same key makes a new key, and the sweep deletes the stored answer", async () => {
      const first = await json(await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "daily" }));
      expect(await context.store.deleteExpiredIdempotencyRecords(context.clock.now() + IDEMPOTENCY_TTL_MS - 1)).toBe(0);
      context.clock.advance(IDEMPOTENCY_TTL_MS);
      expect(await context.store.deleteExpiredIdempotencyRecords(context.clock.now())).toBe(1);
      expect(await queryRows(context.store, "SELECT scope FROM idempotency_records")).toEqual([]);
      ada = await signIn(context, "ada@example.com"); // the first session ended after 24 h too
      const later = await json(await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "daily" }));
      expect(later.clearKey).not.toBe(first.clearKey);
      expect((await json(await list(ada))).items).toHaveLength(2);
    });

    test("the stored answer holds neither the clear key nor the Idempotency-Key in readable form", async () => {
      const { clearKey } = await json(await post(KEYS, ada, { name: "ci" }, { "idempotency-key": "c0ffee-idempotency-key" }));
      const stored = await storedText(context);
      expect(stored).toContain('"status":"done"');
      expect(stored).not.toContain(clearKey);
      expect(stored).not.toContain("c0ffee-idempotency-key");
    });

    test("an Idempotency-Key that is empty, too long or not visible ASCII is 400 invalid-parameter", async () => {
      for (const value of ["x".repeat(256), "has space", "é"]) {
        const response = await post(KEYS, ada, { name: "ci" }, { "idempotency-key": value });
        expect(response.status).toBe(400);
        expect((await json(response)).type).toEndWith("/invalid-parameter");
      }
      expect((await json(await list(ada))).items).toHaveLength(0);
    });
  });

  securityTests({ method: "POST", path: () => KEYS, body: () => ({ name: "attacker" }), accepts: "session" }, () => context);
});

describe("POST /api/v1/customer/api-keys/{id}/rotate", () => {
  test("the key becomes ROTATED, its secret stops working at once, and a new ACTIVE key of the same name is returned", async () => {
    await context.store.grantCredits({
      organizationId: ada.organizationId,
      source: "grant",
      type: "grant",
      amount: 5,
      expiresAt: null,
      description: "test",
      now: context.clock.now(),
    });
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]);
    const original = await createKey(ada, "production");
    const response = await post(`${KEYS}/${original.key.id}/rotate`, ada);
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const rotated = await json(response);
    expect(rotated.key).toMatchObject({ name: "production", status: "ACTIVE", replacedBy: null, lastUsedAt: null, createdBy: { id: ada.userId } });
    expect(rotated.key.id).not.toBe(original.key.id);
    expect(isWellFormedKey(rotated.clearKey, "pps_")).toBe(true);
    const old = await price(original.clearKey);
    expect(old.status).toBe(401);
    expect((await json(old)).detail).toBe("The API key was rotated; use its replacement.");
    expect((await price(rotated.clearKey)).status).toBe(200);
    const stored = await context.store.getApiKey(ada.organizationId, original.key.id);
    expect(stored).toMatchObject({ status: "ROTATED", replacedBy: rotated.key.id });
  });

  test("rotating a ROTATED or REVOKED key is 409 invalid-key-state", async () => {
    const rotatedAway = await createKey(ada);
    await post(`${KEYS}/${rotatedAway.key.id}/rotate`, ada);
    const revoked = await createKey(ada);
    await post(`${KEYS}/${revoked.key.id}/revoke`, ada);
    for (const [id, status] of [
      [rotatedAway.key.id, "ROTATED"],
      [revoked.key.id, "REVOKED"],
    ]) {
      const response = await post(`${KEYS}/${id}/rotate`, ada);
      expect(response.status).toBe(409);
      const body = await json(response);
      expect(body.type).toEndWith("/invalid-key-state");
      expect(body.detail).toBe(`The key is ${status}; only an ACTIVE key can be rotated or revoked.`);
    }
    expect((await json(await list(ada))).items).toHaveLength(3);
  });

  test("another organization's key or an unknown id is 404 not-found, and the key keeps working", async () => {
    const eves = await createKey(eve);
    for (const id of [eves.key.id, "key_doesnotexist", "anything"]) {
      const response = await post(`${KEYS}/${id}/rotate`, ada);
      expect(response.status).toBe(404);
      expect((await json(response)).type).toEndWith("/not-found");
    }
    expect((await context.store.getApiKeyById(eves.key.id))!.status).toBe("ACTIVE");
  });

  test("of two concurrent rotations of one key, exactly one wins", async () => {
    const { key } = await createKey(ada);
    const responses = await Promise.all([post(`${KEYS}/${key.id}/rotate`, ada), post(`${KEYS}/${key.id}/rotate`, ada)]);
    expect(responses.map((response) => response.status).sort()).toEqual([200, 409]);
    expect((await json(await list(ada))).items).toHaveLength(2);
  });

  securityTests({ method: "POST", path: () => `${KEYS}/key_whatever/rotate`, accepts: "session" }, () => context);
});

describe("POST /api/v1/customer/api-keys/{id}/revoke", () => {
  test("the key becomes REVOKED for good, and requests with it get 401", async () => {
    const { key, clearKey } = await createKey(ada);
    const response = await post(`${KEYS}/${key.id}/revoke`, ada);
    expect(response.status).toBe(200);
    expect(await json(response)).toMatchObject({ id: key.id, status: "REVOKED", name: "production" });
    const refused = await price(clearKey);
    expect(refused.status).toBe(401);
    expect(refused.headers.get("www-authenticate")).toStartWith("Bearer");
  });

  test("revoking a key that is not ACTIVE is 409 invalid-key-state", async () => {
    const { key } = await createKey(ada);
    await post(`${KEYS}/${key.id}/revoke`, ada);
    const again = await post(`${KEYS}/${key.id}/revoke`, ada);
    expect(again.status).toBe(409);
    expect((await json(again)).type).toEndWith("/invalid-key-state");
    const rotated = await createKey(ada);
    await post(`${KEYS}/${rotated.key.id}/rotate`, ada);
    expect((await post(`${KEYS}/${rotated.key.id}/revoke`, ada)).status).toBe(409);
  });

  test("another organization's key or an unknown id is 404 not-found, and the key stays ACTIVE", async () => {
    const eves = await createKey(eve);
    const response = await post(`${KEYS}/${eves.key.id}/revoke`, ada);
    expect(response.status).toBe(404);
    expect((await json(response)).detail).toBe("No API key with this id exists in your organization.");
    expect((await post(`${KEYS}/key_doesnotexist/revoke`, ada)).status).toBe(404);
    expect((await context.store.getApiKeyById(eves.key.id))!.status).toBe("ACTIVE");
  });

  test("a cross-site revoke with a valid cookie is refused and leaves the key ACTIVE", async () => {
    const { key } = await createKey(ada);
    const response = await post(`${KEYS}/${key.id}/revoke`, ada, undefined, { origin: "https://evil.example.com" });
    expect(response.status).toBe(403);
    expect((await context.store.getApiKeyById(key.id))!.status).toBe("ACTIVE");
  });

  securityTests({ method: "POST", path: () => `${KEYS}/key_whatever/revoke`, accepts: "session" }, () => context);
});

describe("authentication comes before validation", () => {
  test("a stranger with a malformed body gets 401, not a validation error that reveals the schema", async () => {
    const response = await context.request("/api/v1/customer/api-keys", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: 42 }),
    });
    expect(response.status).toBe(401);
    expect((await json(response)).type).toEndWith("/unauthorized");
  });

  test("a signed-in user with the same body gets 422", async () => {
    const response = await context.request("/api/v1/customer/api-keys", {
      method: "POST",
      headers: { "content-type": "application/json", ...ada.headers },
      body: JSON.stringify({ name: 42 }),
    });
    expect(response.status).toBe(422);
  });
});
