import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { SQLiteStore } from "../db/sqlite-store";
import { hashSecret } from "../lib/crypto";
import { hashRequestBody, IDEMPOTENCY_ABANDONED_MS, IDEMPOTENCY_TTL_MS, runIdempotent, withIdempotency } from "./idempotency";
import { Problem } from "./problem";

const NOW = Date.parse("2026-11-22T10:00:00.000Z");
const SCOPE = "org_1 POST /api/v1/things";

let store: SQLiteStore;

beforeEach(() => {
  store = SQLiteStore.open("sqlite::memory:");
});

afterEach(async () => {
  await store.close();
});

function request(key: string, body: unknown, now = NOW) {
  return { scope: SCOPE, key, requestHash: hashRequestBody(body), now };
}

function counter() {
  let runs = 0;
  return {
    get runs() {
      return runs;
    },
    run: async () => ({ status: 201, body: { run: ++runs, secret: `secret-${runs}` } }),
  };
}

async function problemOf(promise: Promise<unknown>): Promise<Problem> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof Problem) return error;
    throw error;
  }
  throw new Error("expected a Problem");
}

describe("withIdempotency", () => {
  test("the first call runs and the retries replay its answer without running again", async () => {
    const work = counter();
    const first = await withIdempotency(store, request("k1", { a: 1 }), work.run);
    const second = await withIdempotency(store, request("k1", { a: 1 }, NOW + 1000), work.run);
    expect(first).toEqual({ status: 201, body: { run: 1, secret: "secret-1" }, replayed: false });
    expect(second).toEqual({ status: 201, body: { run: 1, secret: "secret-1" }, replayed: true });
    // A finished answer is never taken over as abandoned: it replays for the whole 24 h.
    const later = await withIdempotency(store, request("k1", { a: 1 }, NOW + IDEMPOTENCY_TTL_MS - 1), work.run);
    expect(later).toEqual(second);
    expect(work.runs).toBe(1);
  });

  test("the request hash ignores the key order of the body, not its values", () => {
    expect(hashRequestBody({ a: 1, b: [1, { c: "x", d: null }] })).toBe(hashRequestBody({ b: [1, { d: null, c: "x" }], a: 1 }));
    expect(hashRequestBody({ a: 1 })).not.toBe(hashRequestBody({ a: "1" }));
    expect(hashRequestBody({ a: 1, b: undefined })).toBe(hashRequestBody({ a: 1 }));
  });

  test("the same key with another body is a 422 problem and does not run", async () => {
    const work = counter();
    await withIdempotency(store, request("k1", { a: 1 }), work.run);
    const problem = await problemOf(withIdempotency(store, request("k1", { a: 2 }), work.run));
    expect(problem.slug).toBe("unprocessable-body");
    expect(problem.status).toBe(422);
    expect(work.runs).toBe(1);
  });

  test("a retry while the first call is still running is a 409 problem with Retry-After", async () => {
    let finish!: () => void;
    const slow = withIdempotency(store, request("k1", { a: 1 }), async () => {
      await new Promise<void>((resolve) => (finish = resolve));
      return { status: 201, body: { done: true } };
    });
    await Bun.sleep(1);
    const problem = await problemOf(withIdempotency(store, request("k1", { a: 1 }), async () => ({ status: 201, body: { done: false } })));
    expect(problem.slug).toBe("conflict");
    expect(problem.headers["retry-after"]).toBe("1");
    expect(problem.detail?.en).toContain("still being processed");
    finish();
    expect((await slow).body).toEqual({ done: true });
    expect((await withIdempotency<unknown>(store, request("k1", { a: 1 }), async () => ({ status: 500, body: null }))).body).toEqual({ done: true });
  });

  test("when the call throws, the key is released and a retry runs again", async () => {
    const boom = withIdempotency(store, request("k1", { a: 1 }), async () => {
      throw new Error("boom");
    });
    await expect(boom).rejects.toThrow("boom");
    const work = counter();
    expect((await withIdempotency(store, request("k1", { a: 1 }), work.run)).replayed).toBe(false);
    expect(work.runs).toBe(1);
  });

  test("when the call throws and the store cannot release the claim, the call's own error is still what the caller gets", async () => {
    const unavailable = new Problem("unavailable", {
      detail: { en: "The debit is in doubt.", fr: "Le débit est incertain." },
      headers: { "retry-after": "1" },
    });
    const release = store.releaseIdempotencyKey.bind(store);
    store.releaseIdempotencyKey = async () => {
      throw new Error("connection refused");
    };
    expect(await problemOf(withIdempotency(store, request("k1", { a: 1 }), async () => Promise.reject(unavailable)))).toBe(unavailable);
    store.releaseIdempotencyKey = release;
    // The claim stays in progress until it counts as abandoned; then the key runs again.
    const work = counter();
    expect((await problemOf(withIdempotency(store, request("k1", { a: 1 }, NOW + 1000), work.run))).slug).toBe("conflict");
    // Abandoned once strictly older than the limit: at the limit itself it still runs.
    expect((await problemOf(withIdempotency(store, request("k1", { a: 1 }, NOW + IDEMPOTENCY_ABANDONED_MS), work.run))).slug).toBe("conflict");
    expect((await withIdempotency(store, request("k1", { a: 1 }, NOW + IDEMPOTENCY_ABANDONED_MS + 1), work.run)).replayed).toBe(false);
    expect(work.runs).toBe(1);
  });

  test("a claim left in progress by a request that died is taken over after a minute", async () => {
    await store.claimIdempotencyKey({
      scope: SCOPE,
      keyHash: hashSecret("k1"),
      requestHash: hashRequestBody({ a: 1 }),
      now: NOW,
      ttlMs: IDEMPOTENCY_TTL_MS,
      abandonAfterMs: 60_000,
    });
    const work = counter();
    expect((await problemOf(withIdempotency(store, request("k1", { a: 1 }, NOW + 1000), work.run))).slug).toBe("conflict");
    // Abandoned once strictly older than the limit: at the limit itself it still runs.
    expect((await problemOf(withIdempotency(store, request("k1", { a: 1 }, NOW + IDEMPOTENCY_ABANDONED_MS), work.run))).slug).toBe("conflict");
    expect((await withIdempotency(store, request("k1", { a: 1 }, NOW + IDEMPOTENCY_ABANDONED_MS + 1), work.run)).replayed).toBe(false);
    expect(work.runs).toBe(1);
  });

  test("after 24 h the key is forgotten: a new call runs, even with another body", async () => {
    const work = counter();
    await withIdempotency(store, request("k1", { a: 1 }), work.run);
    const later = await withIdempotency(store, request("k1", { a: 2 }, NOW + IDEMPOTENCY_TTL_MS), work.run);
    expect(later).toMatchObject({ replayed: false, body: { run: 2 } });
  });

  test("keys are independent per scope", async () => {
    const work = counter();
    await withIdempotency(store, request("k1", { a: 1 }), work.run);
    const other = await withIdempotency(store, { ...request("k1", { a: 1 }), scope: "org_2 POST /api/v1/things" }, work.run);
    expect(other.replayed).toBe(false);
    expect(work.runs).toBe(2);
  });

  test("the stored answer is encrypted, and the key is stored only as a hash", async () => {
    await withIdempotency(store, request("a-long-random-idempotency-key", { a: 1 }), counter().run);
    const rows = store.connection.query("SELECT * FROM idempotency_records").all() as Array<Record<string, unknown>>;
    expect(rows).toHaveLength(1);
    const row = rows[0]!;
    expect(row.key_hash).toBe(hashSecret("a-long-random-idempotency-key"));
    expect(row.response_status).toBe(201);
    expect(String(row.response_body)).toStartWith("v1.");
    expect(JSON.stringify(row)).not.toContain("secret-1");
    expect(JSON.stringify(row)).not.toContain("a-long-random-idempotency-key");
  });

  test("expired records are swept", async () => {
    await withIdempotency(store, request("k1", { a: 1 }), counter().run);
    await withIdempotency(store, request("k2", { a: 1 }, NOW + 1000), counter().run);
    expect(await store.deleteExpiredIdempotencyRecords(NOW + IDEMPOTENCY_TTL_MS)).toBe(1);
    expect(await store.deleteExpiredIdempotencyRecords(NOW + IDEMPOTENCY_TTL_MS + 1000)).toBe(1);
  });
});

describe("runIdempotent", () => {
  const post = (key: string | undefined | null, work: ReturnType<typeof counter>) =>
    runIdempotent(store, { key, organizationId: "org_1", route: "POST /api/v1/things", body: { a: 1 }, now: NOW }, work.run);

  test("without an Idempotency-Key every call runs, nothing is stored and nothing is a replay", async () => {
    const work = counter();
    for (const key of [undefined, null, undefined]) expect(await post(key, work)).toMatchObject({ status: 201, replayed: false });
    expect(work.runs).toBe(3);
    expect(store.connection.query("SELECT count(*) AS n FROM idempotency_records").get()).toEqual({ n: 0 });
  });

  test("with one, the organization and route make the scope: a retry replays, another route runs", async () => {
    const work = counter();
    expect(await post("k1", work)).toMatchObject({ body: { run: 1 }, replayed: false });
    expect(await post("k1", work)).toMatchObject({ body: { run: 1 }, replayed: true });
    const elsewhere = await runIdempotent(store, { key: "k1", organizationId: "org_1", route: "POST /api/v1/others", body: { a: 1 }, now: NOW }, work.run);
    expect(elsewhere).toMatchObject({ body: { run: 2 }, replayed: false });
  });
});

describe("the request hash behind an Idempotency-Key", () => {
  test("key order and absent members do not matter; nested objects are read the same way", () => {
    expect(hashRequestBody({ b: 1, a: { d: [1, 2], c: "x" } })).toBe(hashRequestBody({ a: { c: "x", d: [1, 2] }, b: 1 }));
    expect(hashRequestBody({ a: 1, b: undefined })).toBe(hashRequestBody({ a: 1 }));
    for (const order of [
      ["c", "a", "b"],
      ["b", "c", "a"],
      ["a", "c", "b"],
      ["b", "a", "c"],
      ["c", "b", "a"],
    ]) {
      expect(hashRequestBody(Object.fromEntries(order.map((key) => [key, key])))).toBe(hashRequestBody({ a: "a", b: "b", c: "c" }));
    }
  });

  test("what a request asks for does matter: values, their types, array order, null against absent", () => {
    const hashes = [
      { gtins: ["1", "2"] },
      { gtins: ["2", "1"] },
      { gtins: "1,2" },
      { gtins: [1, 2] },
      { gtins: ["1", "2"], language: "fr" },
      { gtins: ["1", "2"], language: null },
      { gtins: [["1", "2"]] },
      { gtins: { 0: "1", 1: "2" } },
      null,
      [],
      {},
    ].map(hashRequestBody);
    expect(new Set(hashes).size).toBe(hashes.length);
  });
});
