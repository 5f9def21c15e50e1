import { afterEach, describe, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import type { Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createServices } from "../../src/services";
import {
  addProduct,
  createOrganization,
  createSQLiteTestDatabase,
  json,
  ledgerSum,
  openTestStore,
  type TestContext,
  type TestDatabase,
  type TestOrganization,
} from "../support/context";

// An answer may claim a debit only when the debit committed.
const FRESH = "04006381333931";

/** The store with a gate on the product read: `hold()` makes the next look-up wait inside its work. */
function withGate(store: Store) {
  let gate: { opened: Promise<void>; open: () => void; reached: () => void; arrived: Promise<void> } | null = null;
  const reservations: string[] = [];
  const gated = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (property === "reserveCredits") {
        return async (...args: unknown[]) => {
          const reservation = (await Reflect.apply(value, target, args)) as Awaited<ReturnType<Store["reserveCredits"]>>;
          if (reservation.ok) reservations.push(reservation.reservationId);
          return reservation;
        };
      }
      if (property === "findProductWithOffers") {
        return async (...args: unknown[]) => {
          const current = gate;
          if (current !== null) {
            gate = null;
            current.reached();
            await current.opened;
          }
          return Reflect.apply(value, target, args);
        };
      }
      return value.bind(target);
    },
  }) as Store;
  return {
    store: gated,
    reservations,
    /** The next product read waits until `open` is called; `arrived` resolves once a request waits there. */
    hold() {
      let open!: () => void;
      let reached!: () => void;
      const opened = new Promise<void>((resolve) => (open = resolve));
      const arrived = new Promise<void>((resolve) => (reached = resolve));
      gate = { opened, open, reached, arrived };
      return { open, arrived };
    },
  };
}

async function gatedContext(store: Store): Promise<TestContext & { gate: ReturnType<typeof withGate> }> {
  const gate = withGate(store);
  const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "error", RATE_LIMIT: "100000/s" });
  const clock = new FakeClock();
  const logs: string[] = [];
  const services = createServices({ config, store: gate.store, clock, logger: createLogger({ level: "error", write: (line) => logs.push(line) }) });
  const app = createApp(services);
  return {
    app,
    services,
    store,
    clock,
    logs,
    gate,
    request: (path, init) => app.handle(new Request(`http://localhost${path}`, init)),
    close: () => store.close(),
  };
}

/** Makes every insert into the ledger fail until the returned function is called. */
async function failLedgerWrites(store: Store): Promise<() => Promise<void>> {
  if (store instanceof SQLiteStore) {
    store.connection.exec("CREATE TRIGGER test_fail_ledger BEFORE INSERT ON credit_transactions BEGIN SELECT RAISE(ABORT, 'disk I/O error (injected)'); END");
    return async () => void store.connection.exec("DROP TRIGGER test_fail_ledger");
  }
  const sql = (store as PostgresStore).connection;
  await sql.unsafe("CREATE FUNCTION test_fail_ledger() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'could not write (injected)'; END $$ LANGUAGE plpgsql");
  await sql.unsafe("CREATE TRIGGER test_fail_ledger BEFORE INSERT ON credit_transactions FOR EACH ROW EXECUTE FUNCTION test_fail_ledger()");
  return async () => void (await sql.unsafe("DROP TRIGGER test_fail_ledger ON credit_transactions; DROP FUNCTION test_fail_ledger()"));
}

let context: (TestContext & { gate: ReturnType<typeof withGate> }) | undefined;
let database: TestDatabase | undefined;
afterEach(async () => {
  await context?.close();
  await database?.drop();
  context = undefined;
  database = undefined;
});

async function setUp(credits: number, store?: Store): Promise<TestOrganization> {
  context = await gatedContext(store ?? (await openTestStore()));
  const org = await createOrganization(context, credits);
  await addProduct(context, FRESH, [{ merchantId: "m-1", price: 199, ageMs: 0 }]);
  return org;
}

function lookUp(org: TestOrganization, headers: Record<string, string> = {}): Promise<Response> {
  return context!.request(`/api/v1/products/${FRESH}/price`, { headers: { ...org.auth, ...headers } });
}

async function expectBalance(org: TestOrganization, available: number): Promise<void> {
  const balance = await context!.store.getBalance(org.organizationId, context!.clock.now());
  expect(balance).toMatchObject({ available, reserved: 0 });
  expect(await ledgerSum(context!.store, org.organizationId)).toBe(available);
}

async function expectUnbilled503(response: Response): Promise<void> {
  expect(response.status).toBe(503);
  expect(response.headers.get("retry-after")).toBe("1");
  const body = await json(response);
  expect(body.type).toEndWith("/unavailable");
  expect(body.data).toBeUndefined();
  expect(body.meta).toMatchObject({ reason: "unavailable", billable: false, creditsConsumed: 0 });
}

describe("a debit that does not commit", () => {
  test("when its write fails, the answer is 503 without the data, nothing is billed and the credits are free at once", async () => {
    const org = await setUp(3);
    const restore = await failLedgerWrites(context!.store);
    await expectUnbilled503(await lookUp(org));
    await expectBalance(org, 3);
    await restore();
    const billed = await lookUp(org);
    expect(billed.status).toBe(200);
    expect((await json(billed)).meta).toMatchObject({ creditsConsumed: 1, creditsRemaining: 2 });
    await expectBalance(org, 2);
  });

  test("with an Idempotency-Key, a retry after the failure runs again at once (no 409) and is billed once", async () => {
    const org = await setUp(3);
    const restore = await failLedgerWrites(context!.store);
    await expectUnbilled503(await lookUp(org, { "idempotency-key": "retry-me" }));
    await restore();
    const retried = await lookUp(org, { "idempotency-key": "retry-me" });
    expect(retried.status).toBe(200);
    const replayed = await lookUp(org, { "idempotency-key": "retry-me" });
    expect(replayed.headers.get("idempotent-replayed")).toBe("true");
    await expectBalance(org, 2);
  });

  test("when its reservation was released while the request ran (the stale sweep), the answer is 503 and nothing is billed", async () => {
    const org = await setUp(2);
    const { open, arrived } = context!.gate.hold();
    const pending = lookUp(org, { "idempotency-key": "swept" });
    await arrived;
    // What the stale sweep does to a request it believes dead.
    expect(await context!.store.releaseReservation(context!.gate.reservations.at(-1)!, context!.clock.now())).toBe(true);
    open();
    await expectUnbilled503(await pending);
    await expectBalance(org, 2);
    // The key is free again: the retry is answered and billed once.
    expect((await lookUp(org, { "idempotency-key": "swept" })).status).toBe(200);
    await expectBalance(org, 1);
  });
});

// SQLite only, on its own file in the PostgreSQL pass too: a file lock has no PostgreSQL twin.
describe("a SQLite write lock held by another process", () => {
  test("look-ups wait for it without freezing the server, then answer 503 and free their credits; once it is gone they are billed", async () => {
    database = createSQLiteTestDatabase();
    const org = await setUp(5, SQLiteStore.open(database.url));
    const holder = new Worker(new URL("../simulation/lock-holder.ts", import.meta.url));
    const message = (text: string) =>
      new Promise<void>((resolve) => holder.addEventListener("message", (event) => (event as MessageEvent).data === text && resolve()));
    const locked = message("locked");
    const released = message("released");
    holder.postMessage({ path: database.url.slice("sqlite:".length), ms: 4_000 });
    await locked;
    let ticks = 0;
    const timer = setInterval(() => ticks++, 20);
    const answers = await Promise.all(Array.from({ length: 4 }, () => lookUp(org)));
    clearInterval(timer);
    for (const answer of answers) await expectUnbilled503(answer);
    // The 3 s the look-ups waited were spent between event-loop turns: the timer kept firing.
    expect(ticks).toBeGreaterThan(50);
    await released;
    holder.terminate();
    await expectBalance(org, 5);
    expect((await lookUp(org)).status).toBe(200);
    await expectBalance(org, 4);
  });
});
