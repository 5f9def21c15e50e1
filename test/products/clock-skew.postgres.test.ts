import { afterEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { applyPostgresMigrations } from "../../src/db/migrate";
import { PostgresStore } from "../../src/db/postgres-store";
import type { Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createServices } from "../../src/services";
import { addProduct, ageReservations, createOrganization, createTestDatabase, json, ledgerSum, queryRows, type TestDatabase } from "../support/context";

// Two instances on one PostgreSQL database whose clocks disagree by 61 s:
// ages of reservations and Idempotency-Key claims are judged by the database's clock alone.
const FRESH = "04006381333931";
const SKEW_MS = 61_000;

interface Instance {
  store: Store;
  /** The store without the gate, for raw queries. */
  raw: PostgresStore;
  clock: FakeClock;
  request(path: string, init?: RequestInit): Promise<Response>;
  /** The next product read of this instance waits until `open()`. */
  hold(): { open: () => void; arrived: Promise<void> };
}

function instance(databaseUrl: string, offsetMs: number): Instance {
  const inner = PostgresStore.connect(databaseUrl);
  let gate: { opened: Promise<void>; reached: () => void } | null = null;
  const store = new Proxy(inner, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (property !== "findProductWithOffers") return value.bind(target);
      return async (...args: unknown[]) => {
        const current = gate;
        gate = null;
        if (current !== null) {
          current.reached();
          await current.opened;
        }
        return Reflect.apply(value, target, args);
      };
    },
  }) as Store;
  const clock = new FakeClock(Date.now() + offsetMs);
  const services = createServices({
    config: loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "error", RATE_LIMIT: "100000/s" }),
    store,
    clock,
    logger: createLogger({ level: "error", write: () => {} }),
  });
  const app = createApp(services);
  return {
    store,
    raw: inner,
    clock,
    request: (path, init) => app.handle(new Request(`http://localhost${path}`, init)),
    hold() {
      let open!: () => void;
      let reached!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      const arrived = new Promise<void>((resolve) => (reached = resolve));
      gate = { opened, reached };
      return { open, arrived };
    },
  };
}

let database: TestDatabase;
let a: Instance;
let b: Instance;
afterEach(async () => {
  await a.store.close();
  await b.store.close();
  await database.drop();
});

async function setUp(credits: number) {
  database = await createTestDatabase();
  await applyPostgresMigrations(database.url);
  a = instance(database.url, 0);
  b = instance(database.url, SKEW_MS);
  const context = { store: a.raw, clock: a.clock, services: { config: loadConfig({}) } } as never;
  const org = await createOrganization(context, credits);
  await addProduct(context, FRESH, [{ merchantId: "m-1", price: 199, ageMs: 0 }]);
  return org;
}

const usageRows = async () => (await queryRows(a.raw, "SELECT id FROM ledger_entries WHERE type = 'usage'")).length;

describe("an instance whose clock runs 61 s ahead", () => {
  test("neither sweeps another instance's running request nor takes over its Idempotency-Key: one debit, one answer", async () => {
    const org = await setUp(3);
    const headers = { ...org.auth, "idempotency-key": "skewed" };
    const held = a.hold();
    const first = a.request(`/api/v1/products/${FRESH}/price`, { headers });
    await held.arrived;

    expect(await b.store.releaseStaleReservations(b.clock.now())).toBe(0);
    const retry = await b.request(`/api/v1/products/${FRESH}/price`, { headers });
    expect(retry.status).toBe(409);

    held.open();
    const answer = await first;
    expect(answer.status).toBe(200);
    expect((await json(answer)).meta).toMatchObject({ creditsConsumed: 1 });
    expect(await usageRows()).toBe(1);
    expect(await ledgerSum(a.store, org.organizationId)).toBe(2);
    const replay = await b.request(`/api/v1/products/${FRESH}/price`, { headers });
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await usageRows()).toBe(1);
  });

  test("never sweeps a capped key's reservation row while its request runs on another instance: the sweep judges ages by the database's clock", async () => {
    const org = await setUp(3);
    // A capped key's look-up holds its credits in a reservation row, which every instance's sweep sees.
    await a.raw.updateApiKeyControls(org.organizationId, org.keyId, { monthlyCreditLimit: 100 });
    const held = a.hold();
    const first = a.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth });
    await held.arrived;
    expect(await queryRows(a.raw, "SELECT id FROM reservations")).toHaveLength(1);

    expect(await b.store.releaseStaleReservations(b.clock.now())).toBe(0);
    expect(await queryRows(a.raw, "SELECT id FROM reservations")).toHaveLength(1);
    expect(await b.store.getBalance(org.organizationId, b.clock.now())).toMatchObject({ available: 2, reserved: 1 });

    held.open();
    const answer = await first;
    expect(answer.status).toBe(200);
    expect((await json(answer)).meta).toMatchObject({ creditsConsumed: 1, creditsRemaining: 2 });
    expect(await usageRows()).toBe(1);
    expect(await ledgerSum(a.store, org.organizationId)).toBe(2);
    expect(await a.store.getBalance(org.organizationId, a.clock.now())).toMatchObject({ available: 2, reserved: 0 });
  });

  test("a request stalled past the claim's age loses its claim to the retry and is not billed: the claim fences its debit", async () => {
    const org = await setUp(3);
    const headers = { ...org.auth, "idempotency-key": "stalled" };
    const held = a.hold();
    const first = a.request(`/api/v1/products/${FRESH}/price`, { headers });
    await held.arrived;
    // The first request stalls for two minutes of database time: its claim is abandoned (its reservation is not swept).
    await queryRows(a.raw, "UPDATE idempotency_records SET created_at = created_at - 120000");

    const retry = await b.request(`/api/v1/products/${FRESH}/price`, { headers });
    expect(retry.status).toBe(200);
    held.open();
    const late = await first;
    expect(late.status).toBe(503);
    expect((await json(late)).meta).toMatchObject({ billable: false, creditsConsumed: 0 });
    expect(await usageRows()).toBe(1);
    const balance = await a.store.getBalance(org.organizationId, a.clock.now());
    expect(balance).toMatchObject({ available: 2, reserved: 0 });
    expect(await ledgerSum(a.store, org.organizationId)).toBe(2);
  });

  test("a request whose reservation the sweep took (stalled over 60 s of database time) answers 503 and bills nothing", async () => {
    const org = await setUp(3);
    // A capped key's look-ups hold their credits in reservation rows, which the sweep sees.
    await a.raw.updateApiKeyControls(org.organizationId, org.keyId, { monthlyCreditLimit: 100 });
    const held = a.hold();
    const first = a.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth });
    await held.arrived;
    await ageReservations(a.raw, 120_000);
    expect(await b.store.releaseStaleReservations(b.clock.now())).toBe(1);
    held.open();
    expect((await first).status).toBe(503);
    expect(await usageRows()).toBe(0);
    expect(await a.store.getBalance(org.organizationId, a.clock.now())).toMatchObject({ available: 3, reserved: 0 });
  });

  test("an uncapped key's request stalled over 60 s holds its credits in its own instance's memory: nothing to sweep, billed once", async () => {
    const org = await setUp(3);
    const held = a.hold();
    const first = a.request(`/api/v1/products/${FRESH}/price`, { headers: org.auth });
    await held.arrived;
    await ageReservations(a.raw, 120_000);
    expect(await b.store.releaseStaleReservations(b.clock.now())).toBe(0);
    expect(await a.store.getBalance(org.organizationId, a.clock.now())).toMatchObject({ available: 2, reserved: 1 });
    expect(await b.store.getBalance(org.organizationId, b.clock.now())).toMatchObject({ available: 3, reserved: 0 });
    held.open();
    const answer = await first;
    expect(answer.status).toBe(200);
    expect((await json(answer)).meta).toMatchObject({ creditsConsumed: 1, creditsRemaining: 2 });
    expect(await usageRows()).toBe(1);
    expect(await a.store.getBalance(org.organizationId, a.clock.now())).toMatchObject({ available: 2, reserved: 0 });
    expect(await ledgerSum(a.store, org.organizationId)).toBe(2);
  });
});
