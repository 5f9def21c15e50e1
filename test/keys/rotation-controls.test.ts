// Rotation and control changes never interleave: the replacement carries the controls the old key
// had when it stopped being ACTIVE, and a change that comes later is refused, not applied to a dead key.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { Store } from "../../src/db/store";
import { addProduct, createTestContext, json, signIn, type TestContext, type TestSession } from "../support/context";

const KEYS = "/api/v1/customer/api-keys";
const FRESH = "04006381333931";
const LOOSE = { expiresAt: "2027-06-01T00:00:00.000Z", monthlyCreditLimit: 1000, rateLimit: 20 };
const TIGHT = { expiresAt: "2027-01-01T00:00:00.000Z", monthlyCreditLimit: 0, rateLimit: 2 };

let context: TestContext;
let ada: TestSession;

beforeEach(async () => {
  context = await createTestContext({ RATE_LIMIT: "50/s" });
  ada = await signIn(context, "ada@example.com");
  await context.store.grantCredits({
    organizationId: ada.organizationId,
    source: "grant",
    type: "grant",
    amount: 100,
    expiresAt: null,
    description: "test",
    now: context.clock.now(),
  });
  await addProduct(context, FRESH, [{ merchantId: "m-a", price: 999, ageMs: 60_000 }]);
});

afterEach(async () => {
  await context.close();
});

function send(method: string, path: string, body?: unknown) {
  return context.request(path, {
    method,
    headers: { ...ada.headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function createKey(): Promise<{ key: any; clearKey: string }> {
  const response = await send("POST", KEYS, { name: "leaked", ...LOOSE });
  expect(response.status).toBe(201);
  return json(response);
}

const rotate = (id: string) => send("POST", `${KEYS}/${id}/rotate`);
const patch = (id: string, body: unknown) => send("PATCH", `${KEYS}/${id}`, body);
const price = (clearKey: string) => context.request(`/api/v1/products/${FRESH}/price`, { headers: { authorization: `Bearer ${clearKey}` } });

/**
 * Runs `step` at the store's rotation, `before` or `after` its write: the latest moment a request
 * can come between a rotation's checks and its write, and the earliest after it.
 */
function atRotationWrite(store: Store, when: "before" | "after", step: () => Promise<void>): void {
  const write = store.rotateApiKey.bind(store);
  store.rotateApiKey = async (...args) => {
    if (when === "before") await step();
    const rotated = await write(...args);
    if (when === "after") await step();
    return rotated;
  };
}

describe("a PATCH racing a rotation", () => {
  test("a cap lowered just before the rotation's write is the replacement's cap, and binds its secret", async () => {
    const { key } = await createKey();
    let lowered: Response | undefined;
    atRotationWrite(context.store, "before", async () => {
      lowered = await patch(key.id, TIGHT);
    });
    const response = await rotate(key.id);
    expect(response.status).toBe(200);
    expect(lowered!.status).toBe(200);
    const rotated = await json(response);
    expect(rotated.key).toMatchObject({ status: "ACTIVE", ...TIGHT });
    const listed = (await json(await send("GET", KEYS))).items;
    expect(listed.find((item: any) => item.id === rotated.key.id)).toMatchObject(TIGHT);
    expect(listed.find((item: any) => item.id === key.id)).toMatchObject({ status: "ROTATED", replacedBy: rotated.key.id, ...TIGHT });
    const refused = await price(rotated.clearKey);
    expect(refused.status).toBe(402);
    expect((await json(refused)).detail).toStartWith("This API key reached its monthly credit limit of 0 credits");
  });

  test("a PATCH just after the rotation's write is 409 invalid-key-state and changes neither key", async () => {
    const { key } = await createKey();
    let late: Response | undefined;
    atRotationWrite(context.store, "after", async () => {
      late = await patch(key.id, TIGHT);
    });
    const rotated = await json(await rotate(key.id));
    expect(late!.status).toBe(409);
    const problem = await json(late!);
    expect(problem.type).toEndWith("/invalid-key-state");
    expect(problem.detail).toBe("The key is ROTATED; only an ACTIVE key's controls can be changed.");
    const listed = (await json(await send("GET", KEYS))).items;
    expect(listed.find((item: any) => item.id === rotated.key.id)).toMatchObject(LOOSE);
    expect(listed.find((item: any) => item.id === key.id)).toMatchObject(LOOSE);
    expect((await price(rotated.clearKey)).status).toBe(200);
  });

  test("concurrent rotations and PATCHes: every PATCH answered 200 is on the replacement, every other one is 409", async () => {
    const keys = await Promise.all(Array.from({ length: 6 }, () => createKey()));
    const pairs = await Promise.all(keys.map(({ key }) => Promise.all([rotate(key.id), patch(key.id, TIGHT)])));
    for (const [rotated, patched] of pairs) {
      expect(rotated.status).toBe(200);
      expect([200, 409]).toContain(patched.status);
      expect((await json(rotated)).key).toMatchObject(patched.status === 200 ? TIGHT : LOOSE);
    }
  });
});
