// A seeded, deterministic simulation of the money paths (issue 14): random sequences of look-ups,
// grants, purchases, refunds, disputes, expiries and sweeps against one or two service instances on
// one database, with faults injected between and inside them, and the money invariants checked
// after every step. The same seed always makes the same operations, so a failing seed replays.
import Stripe from "stripe";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { applyPostgresMigrations } from "../../src/db/migrate";
import { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { STALE_RESERVATION_MS, SYSTEM_USER_ID, type Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { newId } from "../../src/lib/ids";
import { createLogger } from "../../src/lib/logger";
import { createApiKey } from "../../src/modules/keys/service";
import { createServices } from "../../src/services";
import { startStripeStandIn, stripeEvent, WEBHOOK_SECRET, type StripeStandIn } from "../billing/stripe-stand-in";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ageReservations, createTestSchema, packOrder, dropTestSchema, queryRows, testApplicationName, type TestDatabase } from "../helpers";

export type StoreKind = "sqlite" | "postgres";

/** Fault classes, each switchable, keyed by what they attack. */
export interface Faults {
  /** An instance dies between two steps: its memory (SQLite holds, in-flight requests) is lost. */
  crash: boolean;
  /** A write inside the debit, refund or grant transaction fails (a trigger raises). */
  failedWrite: boolean;
  /** Another connection holds the SQLite write lock for a while. */
  lockHeld: boolean;
  /** A second instance whose clock runs 61 s ahead (PostgreSQL: instances share the database). */
  clockSkew: boolean;
  /** A look-up stalls inside its work while the clock moves on past the stale-reservation age. */
  stall: boolean;
  /** An operator CLI process works on the same database (grants, balance reads, order completion). */
  cliProcess: boolean;
  /** Provider events arrive twice and out of order; refunds and disputes may precede their payment. */
  providerDisorder: boolean;
  /** PostgreSQL ends the connections of transactions in flight (a restart, a network cut) while look-ups run. */
  connectionLost: boolean;
}

export const ALL_FAULTS: Faults = { crash: true, failedWrite: true, lockHeld: true, clockSkew: true, stall: true, cliProcess: true, providerDisorder: true, connectionLost: true };

export interface SimulationReport {
  seed: number;
  store: StoreKind;
  operations: number;
  faultsInjected: number;
  violations: string[];
  trace: string[];
}

/** mulberry32: a tiny PRNG, enough to make reproducible choices from a seed. */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const FRESH = "04006381333931";
const STALE = "00012345600012";
const MISSING = "09780201379624";
/** A fresh product whose read stalls until an `unstall` step: a request held inside its work. */
const STALLING = "05901234123457";
const START = Date.parse("2026-11-22T10:00:00.000Z");
const STRIPE = { key: "sk_test_standin" };
export const DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";

/** A SQLite file in a temporary directory, or a fresh schema of the PostgreSQL server at `postgresUrl`, migrated. */
async function createDatabase(kind: StoreKind, postgresUrl: string): Promise<TestDatabase> {
  if (kind === "postgres") {
    const url = await createTestSchema(postgresUrl);
    await applyPostgresMigrations(url);
    return { url, drop: () => dropTestSchema(url) };
  }
  const directory = mkdtempSync(join(tmpdir(), "price-sim-"));
  return { url: `sqlite:${join(directory, "sim.db")}`, drop: async () => rmSync(directory, { recursive: true, force: true }) };
}

interface Instance {
  name: string;
  clock: FakeClock;
  /** The instance's own connection; a crash cuts it off. */
  store: Store;
  /** The store behind the cut-off switch, to stop what runs inside it when the instance crashes. */
  inner: Store;
  app: ReturnType<typeof createApp>;
  alive: boolean;
  stalls: Array<() => void>;
  /** Called when a request starts waiting at the stall gate. */
  onStall: () => void;
}

interface SentRequest {
  id: number;
  idempotencyKey: string | null;
  instance: Instance;
  /** Waiting at the stall gate until an `unstall` step. */
  stalled: boolean;
  /** Set when the instance answered. */
  answer: { status: number; requestId: string | null; creditsConsumed: number; billable: boolean; debitInDoubt: boolean } | null;
  settled: Promise<void>;
}

interface Purchase {
  orderId: string;
  sessionId: string;
  paymentIntent: string;
  credits: number;
  amount: number;
  /** Events the provider will send, in the order it made them; delivery picks among them. */
  pending: Array<{ id: string; payload: string }>;
  refunded: boolean;
}

/**
 * The store an instance uses: a cut-off switch (a crashed instance's calls never return, like a dead
 * process's) and a stall gate on the product read (a request held inside its work).
 */
function instanceStore(inner: Store, instance: () => Instance): Store {
  return new Proxy(inner, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const owner = instance();
        if (!owner.alive) return new Promise(() => {});
        if (property === "findProductWithOffers" && args[0] === STALLING) {
          return new Promise((resolve, reject) => {
            owner.stalls.push(() => (value as Function).apply(target, args).then(resolve, reject));
            owner.onStall();
          });
        }
        return (value as Function).apply(target, args);
      };
    },
  }) as Store;
}

async function openStore(database: TestDatabase, kind: StoreKind): Promise<Store> {
  if (kind === "sqlite") return SQLiteStore.open(database.url);
  return PostgresStore.connect(database.url);
}

/** A trigger that makes ledger inserts fail while the sim_faults row says so. */
async function installWriteFault(store: Store): Promise<void> {
  if (store instanceof SQLiteStore) {
    store.connection.exec("CREATE TABLE sim_faults (fail INTEGER NOT NULL)");
    store.connection.exec("INSERT INTO sim_faults VALUES (0)");
    store.connection.exec(
      "CREATE TRIGGER sim_fail_ledger BEFORE INSERT ON credit_transactions WHEN (SELECT fail FROM sim_faults) > 0 BEGIN SELECT RAISE(ABORT, 'injected write failure'); END",
    );
    return;
  }
  const sql = (store as PostgresStore).connection;
  await sql.unsafe("CREATE TABLE sim_faults (fail INTEGER NOT NULL)");
  await sql.unsafe("INSERT INTO sim_faults VALUES (0)");
  await sql.unsafe(
    "CREATE FUNCTION sim_fail_ledger() RETURNS trigger AS $$ BEGIN IF (SELECT fail FROM sim_faults) > 0 THEN RAISE EXCEPTION 'injected write failure'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
  );
  await sql.unsafe("CREATE TRIGGER sim_fail_ledger BEFORE INSERT ON credit_transactions FOR EACH ROW EXECUTE FUNCTION sim_fail_ledger()");
}

async function setWriteFault(observer: Store, on: boolean): Promise<void> {
  await execute(observer, `UPDATE sim_faults SET fail = ${on ? 1 : 0}`);
}

/** A statement of the harness itself; on SQLite it waits out a lock another connection holds, as the stores do. */
async function execute(store: Store, text: string): Promise<void> {
  if (!(store instanceof SQLiteStore)) return void (await (store as PostgresStore).connection.unsafe(text));
  for (;;) {
    try {
      return void store.connection.exec(text);
    } catch (error) {
      if ((error as { code?: string }).code !== "SQLITE_BUSY") throw error;
      await Bun.sleep(5);
    }
  }
}

export async function simulate(options: { seed: number; store: StoreKind; steps?: number; faults?: Partial<Faults>; postgresUrl?: string }): Promise<SimulationReport> {
  const faults: Faults = { ...ALL_FAULTS, ...options.faults };
  if (options.store === "sqlite") faults.clockSkew = false; // one serve per SQLite file: a second instance is refused
  if (options.store === "sqlite") faults.connectionLost = false;
  if (options.store === "postgres") faults.lockHeld = false;
  const random = prng(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const chance = (p: number) => random() < p;
  const trace: string[] = [];
  const violations: string[] = [];
  let faultsInjected = 0;

  const database = await createDatabase(options.store, options.postgresUrl ?? DEFAULT_POSTGRES_URL);
  const observer = await openStore(database, options.store);
  const cli = options.store === "sqlite" ? await openStore(database, "sqlite") : observer;
  const standIn: StripeStandIn = startStripeStandIn();
  const stripe = new Stripe(STRIPE.key, { host: "127.0.0.1", port: standIn.port, protocol: "http", maxNetworkRetries: 0 });
  const config = loadConfig({ PRICE_ENV: "production", LOG_LEVEL: "error", RATE_LIMIT: "1000000/s", BILLING_PROVIDER: "stripe", STRIPE_SECRET_KEY: STRIPE.key, STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET });
  const logger = createLogger({ level: "error", write: () => {} });
  const instances: Instance[] = [];
  const openConnections: Store[] = [observer];
  if (cli !== observer) openConnections.push(cli);
  /** Resolves when the lock holder (SQLite) has let go. */
  let lockReleased: Promise<void> = Promise.resolve();

  const startInstance = async (name: string, now: number): Promise<Instance> => {
    const inner = await openStore(database, options.store);
    openConnections.push(inner);
    // In every third seed a debit waits for PostgreSQL only 0.5 s, so the database-away fault leaves
    // debits in doubt (answered 503, maybe committed) and the checks below see their answers.
    if (inner instanceof PostgresStore && options.seed % 3 === 0) inner.lostConnectionPatienceMs = 500;
    const clock = new FakeClock(now);
    const instance = { name, clock, alive: true, stalls: [], onStall: () => {}, inner } as unknown as Instance;
    instance.store = instanceStore(inner, () => instance);
    const services = createServices({ config, store: instance.store, clock, logger, stripe });
    instance.app = createApp(services);
    await instance.store.recoverInFlightWork(clock.now());
    instances.push(instance);
    return instance;
  };

  const requests: SentRequest[] = [];
  const purchases: Purchase[] = [];
  const idempotencyKeys: string[] = [];
  let sequence = 0;

  try {
    await installWriteFault(observer);
    const now = START;
    const organization = await observer.createOrganization({ name: "Sim Org", now });
    await observer.ensureSystemUser(now);
    const key = await createApiKey(observer, { organizationId: organization.id, name: "sim", createdBy: SYSTEM_USER_ID, keyPrefix: config.keyPrefix, now });
    await observer.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 5 + Math.floor(random() * 10), expiresAt: null, description: "seed grant", now });
    const offer = (observedAt: number) => ({ merchantId: "m-1", merchantName: "Shop", priceAmount: 199, currency: "EUR", shippingAmount: null, availability: "in_stock" as const, condition: "new" as const, url: null, observedAt });
    await observer.applyFeedRecords(
      [
        { product: { gtin: FRESH, title: "Fresh" }, offer: offer(START + 365 * 86_400_000) },
        { product: { gtin: STALE, title: "Stale" }, offer: offer(START - 30 * 86_400_000) },
        { product: { gtin: STALLING, title: "Slow" }, offer: offer(START + 365 * 86_400_000) },
      ],
      now,
    );

    // `first` keeps the reference time even after it crashes (every clock advances together).
    const first = await startInstance("A", START);
    if (faults.clockSkew) await startInstance("B", START + 61_000);
    const alive = () => instances.filter((instance) => instance.alive);
    const advance = (ms: number) => instances.forEach((instance) => instance.clock.advance(ms));

    const sendLookUp = (instance: Instance, gtin: string, idempotencyKey: string | null) => {
      const request: SentRequest = { id: ++sequence, idempotencyKey, instance, stalled: false, answer: null, settled: Promise.resolve() };
      const headers: Record<string, string> = { authorization: `Bearer ${key.clearKey}` };
      if (idempotencyKey !== null) headers["idempotency-key"] = idempotencyKey;
      request.settled = instance.app
        .handle(new Request(`http://localhost/api/v1/products/${gtin}/price`, { headers }))
        .then(async (response) => {
          const body = (await response.json().catch(() => ({}))) as { detail?: string; meta?: { requestId?: string; creditsConsumed?: number; billable?: boolean } };
          request.answer = {
            status: response.status,
            requestId: body.meta?.requestId ?? response.headers.get("x-request-id"),
            creditsConsumed: body.meta?.creditsConsumed ?? 0,
            billable: body.meta?.billable ?? false,
            debitInDoubt: response.status === 503 && (body.detail ?? "").includes("whether it was billed is not known"),
          };
          trace.push(`  answer #${request.id} ${response.status} consumed=${request.answer.creditsConsumed} ${request.answer.requestId}${request.answer.debitInDoubt ? " (debit in doubt)" : ""}`);
        });
      requests.push(request);
      return request;
    };

    const deliver = async (instance: Instance, purchase: Purchase, event: { id: string; payload: string }) => {
      const signature = await stripe.webhooks.generateTestHeaderStringAsync({ payload: event.payload, secret: WEBHOOK_SECRET });
      const response = await instance.app.handle(
        new Request("http://localhost/api/v1/webhooks/stripe", { method: "POST", headers: { "content-type": "application/json", "stripe-signature": signature }, body: event.payload }),
      );
      trace.push(`  webhook ${event.id} for ${purchase.orderId} → ${response.status}`);
    };

    const unstall = () => {
      for (const instance of instances) for (const open of instance.stalls.splice(0)) open();
      for (const request of requests) request.stalled = false;
    };
    const quiesce = async () => {
      unstall();
      await lockReleased;
      await setWriteFault(observer, false);
      await Promise.all(requests.filter((request) => request.instance.alive).map((request) => request.settled));
      // A release whose own write failed is retried in the background (src/modules/products/service.ts).
      for (let waited = 0; waited < 2_000 && (await alive()[0]!.store.getBalance(organization.id, alive()[0]!.clock.now())).reserved > 0; waited += 50) await Bun.sleep(50);
    };

    const operations: Array<[weight: number, name: string, run: () => Promise<void>]> = [
      [
        30,
        "look-up",
        async () => {
          const instance = pick(alive());
          const gtin = pick([FRESH, FRESH, FRESH, FRESH, STALE, MISSING, "4006381333932"]);
          let idempotencyKey: string | null = null;
          if (chance(0.3)) {
            idempotencyKey = idempotencyKeys.length > 0 && chance(0.5) ? pick(idempotencyKeys) : `sim-${options.seed}-${++sequence}`;
            if (!idempotencyKeys.includes(idempotencyKey)) idempotencyKeys.push(idempotencyKey);
          }
          // A retry must send the same request as before, so keyed look-ups all ask for FRESH.
          const stalled = idempotencyKey === null && faults.stall && chance(0.1);
          if (stalled) faultsInjected++;
          const arrived = stalled ? new Promise<void>((resolve) => (instance.onStall = resolve)) : null;
          const request = sendLookUp(instance, stalled ? STALLING : idempotencyKey === null ? gtin : FRESH, idempotencyKey);
          trace.push(`look-up #${request.id} on ${instance.name} key=${idempotencyKey ?? "-"}${stalled ? " (stalls)" : ""}`);
          // It stalls only if it gets as far as the product read (a 402 never does).
          if (arrived !== null) request.stalled = await Promise.race([arrived.then(() => true), request.settled.then(() => false)]);
          if (chance(0.5)) await Promise.race([request.settled, Bun.sleep(0)]);
        },
      ],
      [8, "settle", async () => void (await Promise.all(requests.filter((request) => request.instance.alive && !request.stalled).map((request) => request.settled)))],
      [6, "advance clock", async () => advance(pick([1_000, 5_000, 30_000, 61_000]))],
      [
        5,
        "stale sweep",
        async () => {
          const instance = pick(alive());
          await instance.store.releaseStaleReservations(instance.clock.now()).catch((error: unknown) => trace.push(`  sweep failed: ${error}`));
        },
      ],
      [3, "unstall", async () => unstall()],
      [
        4,
        "grant",
        async () => {
          const by = faults.cliProcess && chance(0.5) ? cli : pick(alive()).store;
          const expiresAt = chance(0.5) ? pick(alive()).clock.now() + pick([10_000, 60_000, 3_600_000]) : null;
          await by
            .grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 1 + Math.floor(random() * 5), expiresAt, description: "sim grant", now: first.clock.now() })
            .catch((error: unknown) => trace.push(`  grant failed: ${error}`));
        },
      ],
      [
        3,
        "expiry",
        async () => {
          const instance = pick(alive());
          await instance.store.expireBuckets(instance.clock.now()).catch((error: unknown) => trace.push(`  expiry failed: ${error}`));
        },
      ],
      [
        faults.cliProcess ? 3 : 0,
        "cli balance",
        async () => void (await cli.getBalance(organization.id, first.clock.now())),
      ],
      [
        4,
        "purchase",
        async () => {
          const n = ++sequence;
          const credits = 3 + Math.floor(random() * 8);
          const purchase: Purchase = { orderId: newId("ord", START + n), sessionId: `cs_sim_${n}`, paymentIntent: `pi_sim_${n}`, credits, amount: credits * 100, pending: [], refunded: false };
          await observer.createOrder(
            packOrder({ id: purchase.orderId, organizationId: organization.id, credits, amount: purchase.amount, now: first.clock.now(), provider: "stripe", providerRef: purchase.sessionId }),
          );
          const session = { id: purchase.sessionId, object: "checkout.session", mode: "payment", client_reference_id: purchase.orderId, payment_intent: purchase.paymentIntent, amount_total: purchase.amount, currency: "eur", payment_status: "paid", status: "complete", metadata: { orderId: purchase.orderId, organizationId: organization.id } };
          purchase.pending.push({ id: `evt_paid_${n}`, payload: stripeEvent(`evt_paid_${n}`, "checkout.session.completed", session) });
          purchases.push(purchase);
          trace.push(`purchase ${purchase.orderId} of ${credits} credits`);
        },
      ],
      [
        3,
        "refund or dispute",
        async () => {
          const candidates = purchases.filter((purchase) => !purchase.refunded);
          if (candidates.length === 0) return;
          const purchase = pick(candidates);
          purchase.refunded = true;
          const n = ++sequence;
          const charge = { id: `ch_sim_${n}`, object: "charge", payment_intent: purchase.paymentIntent, amount: purchase.amount, amount_refunded: purchase.amount, refunded: true, currency: "eur" };
          if (chance(0.7)) purchase.pending.push({ id: `evt_refund_${n}`, payload: stripeEvent(`evt_refund_${n}`, "charge.refunded", charge) });
          else {
            const dispute = { id: `dp_sim_${n}`, object: "dispute", charge: charge.id, payment_intent: purchase.paymentIntent, amount: purchase.amount, currency: "eur", status: "needs_response" };
            purchase.pending.push({ id: `evt_dispute_${n}`, payload: stripeEvent(`evt_dispute_${n}`, "charge.dispute.funds_withdrawn", dispute) });
          }
          trace.push(`refund of ${purchase.orderId} queued`);
        },
      ],
      [
        6,
        "deliver event",
        async () => {
          const waiting = purchases.filter((purchase) => purchase.pending.length > 0);
          if (waiting.length === 0) return;
          const purchase = pick(waiting);
          const index = faults.providerDisorder ? Math.floor(random() * purchase.pending.length) : 0;
          const event = purchase.pending[index]!;
          // Stripe may deliver the same event again later: sometimes keep it queued.
          if (!(faults.providerDisorder && chance(0.3))) purchase.pending.splice(index, 1);
          else faultsInjected++;
          await deliver(pick(alive()), purchase, event);
        },
      ],
      [
        faults.crash ? 2 : 0,
        "crash",
        async () => {
          const victim = pick(alive());
          victim.alive = false;
          // A dead SQLite process writes nothing more: the group commit and retries queued inside its
          // store die with it. (Its replacement can only start then: the serve lock.) On PostgreSQL a
          // statement already sent may still commit, which the store's fences are for.
          if (victim.inner instanceof SQLiteStore) victim.inner.connection.close(false);
          faultsInjected++;
          const replacement = await startInstance(`${victim.name}'`, victim.clock.now());
          trace.push(`  ${victim.name} crashed; ${replacement.name} started`);
        },
      ],
      [
        faults.failedWrite ? 3 : 0,
        "failed write",
        async () => {
          faultsInjected++;
          await setWriteFault(observer, true);
          const instance = pick(alive());
          const request = sendLookUp(instance, FRESH, chance(0.5) ? `sim-${options.seed}-${++sequence}` : null);
          trace.push(`  look-up #${request.id} while writes fail`);
          await request.settled;
          await setWriteFault(observer, false);
        },
      ],
      [
        faults.connectionLost ? 3 : 0,
        "connection lost",
        async () => {
          faultsInjected++;
          const instance = pick(alive());
          const sent = [1, 2, 3].map(() => sendLookUp(instance, FRESH, chance(0.3) ? `sim-${options.seed}-${++sequence}` : null));
          trace.push(`  look-ups #${sent.map((request) => request.id).join(", #")} while connections are ended`);
          // Whatever transactions of the instances are in flight at that moment (a debit between its two
          // steps, with luck; a new connection fetching postgres.js's array types, at times).
          for (let attempt = 0; attempt < 20; attempt++) {
            const [ended] = await queryRows<{ count: number }>(
              observer,
              "SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid() AND xact_start IS NOT NULL AND state <> 'idle'",
              [testApplicationName(database.url)],
            );
            if (ended!.count > 0) {
              trace.push(`  ${ended!.count} connection(s) ended`);
              break;
            }
          }
          // At times PostgreSQL then stays away for a while (a restart): every connection the
          // instances open again is ended too, so debits in doubt wait for it to come back.
          if (chance(0.3)) {
            let ended = 0;
            for (const until = performance.now() + 1_500; performance.now() < until; await Bun.sleep(5)) {
              const [count] = await queryRows<{ count: number }>(
                observer,
                "SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid()",
                [testApplicationName(database.url)],
              );
              ended += count!.count;
            }
            trace.push(`  database away 1.5 s: ${ended} connection(s) ended`);
          }
          await Promise.all(sent.map((request) => request.settled));
        },
      ],
      [
        faults.lockHeld ? 2 : 0,
        "lock held",
        async () => {
          faultsInjected++;
          await lockReleased;
          const holder = new Worker(new URL("./lock-holder.ts", import.meta.url));
          const path = database.url.slice("sqlite:".length);
          const next = (text: string) => new Promise<void>((resolve) => holder.addEventListener("message", function listen(event) {
            if ((event as MessageEvent).data !== text) return;
            holder.removeEventListener("message", listen);
            resolve();
          }));
          const locked = next("locked");
          lockReleased = next("released").then(() => holder.terminate());
          holder.postMessage({ path, ms: pick([20, 100, 300]) });
          await locked;
        },
      ],
    ];
    const total = operations.reduce((sum, [weight]) => sum + weight, 0);

    const steps = options.steps ?? 40;
    for (let step = 0; step < steps; step++) {
      let roll = random() * total;
      const operation = operations.find(([weight]) => (roll -= weight) < 0)!;
      trace.push(`${step}: ${operation[1]}`);
      await operation[2]();
      await checkInvariants(false);
      if (violations.length > 0) break;
    }

    // Let everything settle: the provider sends what it still has, stalls open, locks and faults end,
    // and once the stale age has passed a sweep returns whatever a dead instance held.
    if (violations.length === 0) {
      await quiesce();
      for (const purchase of purchases) for (const event of purchase.pending.splice(0)) await deliver(pick(alive()), purchase, event);
      await quiesce();
      advance(STALE_RESERVATION_MS + 1_000);
      await ageReservations(observer, STALE_RESERVATION_MS + 1_000);
      for (const instance of alive()) await instance.store.releaseStaleReservations(instance.clock.now());
      // Expired credits count in the ledger until the expiry job writes them off; the balance leaves them out.
      await alive()[0]!.store.expireBuckets(alive()[0]!.clock.now());
      await checkInvariants(true);
    }

    async function checkInvariants(settled: boolean): Promise<void> {
      const violation = (text: string) => violations.push(`step ${trace.length}: ${text}`);
      // The answers as they stand before any query: requests still running may answer while this
      // awaits, and an answer given after the usage rows were read must not look unbilled.
      const answered = requests.map((request) => ({ ...request, answer: request.answer === null ? null : { ...request.answer } }));
      // One statement, so PostgreSQL reads the three sums from one snapshot while requests run.
      const [sums] = await queryRows<{ ledger: number | null; remaining: number | null; negative: number | null; reserved: number | null }>(
        observer,
        `SELECT (SELECT sum(amount) FROM credit_transactions WHERE organization_id = ?) AS ledger,
                (SELECT sum(remaining) FROM credit_buckets WHERE organization_id = ?) AS remaining,
                (SELECT sum(CASE WHEN remaining < 0 THEN 1 ELSE 0 END) FROM credit_buckets WHERE organization_id = ?) AS negative,
                (SELECT sum(amount) FROM reservations WHERE organization_id = ?) AS reserved`,
        [organization.id, organization.id, organization.id, organization.id],
      );
      const ledger = { sum: sums?.ledger };
      const buckets = { remaining: sums?.remaining, negative: sums?.negative };
      const reservedInRows = Number(sums?.reserved ?? 0);
      const ledgerSum = Number(ledger?.sum ?? 0);
      const bucketSum = Number(buckets?.remaining ?? 0);
      if (Number(buckets?.negative ?? 0) > 0) violation(`a bucket is below zero`);
      // SQLite holds credits in memory (they stay in their buckets); PostgreSQL moves them into reservation rows.
      if (ledgerSum !== bucketSum + reservedInRows) violation(`ledger sum ${ledgerSum} ≠ buckets ${bucketSum} + reserved ${reservedInRows}`);

      const usage = await queryRows<{ request_id: string }>(observer, "SELECT request_id FROM credit_transactions WHERE organization_id = ? AND type = 'usage'", [organization.id]);
      const usageCount = new Map<string, number>();
      for (const row of usage) usageCount.set(row.request_id, (usageCount.get(row.request_id) ?? 0) + 1);
      const answeredIds = new Map<string, SentRequest[]>();
      for (const request of answered) {
        if (request.answer?.requestId) answeredIds.set(request.answer.requestId, [...(answeredIds.get(request.answer.requestId) ?? []), request]);
        if (request.answer === null || request.answer.creditsConsumed === 0) continue;
        const rows = usageCount.get(request.answer.requestId ?? "") ?? 0;
        if (rows !== 1) violation(`look-up #${request.id} answered ${request.answer.status} with creditsConsumed ${request.answer.creditsConsumed}, but ${rows} usage rows for ${request.answer.requestId}`);
      }
      for (const [requestId, count] of usageCount) {
        if (count > 1) violation(`${count} usage rows for one request ${requestId}`);
        const answers = answeredIds.get(requestId);
        // A usage row with no answer belongs to a request still running, or to an instance that died;
        // one whose answer said its debit was in doubt (the database away) may have committed.
        if (answers !== undefined && answers.every((request) => request.answer!.creditsConsumed === 0 && !request.answer!.debitInDoubt)) {
          violation(`request ${requestId} was debited but answered ${answers.map((request) => request.answer!.status).join(",")} without claiming the credit`);
        }
      }
      for (const idempotencyKey of idempotencyKeys) {
        const billed = new Set(answered.filter((request) => request.idempotencyKey === idempotencyKey && request.answer && request.answer.creditsConsumed > 0).map((request) => request.answer!.requestId));
        const debited = [...billed].filter((requestId) => usageCount.has(requestId ?? ""));
        if (debited.length > 1) violation(`Idempotency-Key ${idempotencyKey} was billed ${debited.length} times`);
      }
      if (!settled) return;
      const live = alive()[0]!;
      const held = await live.store.getBalance(organization.id, live.clock.now());
      if (held.reserved !== 0) violation(`${held.reserved} credits still held after every request settled`);
      if (held.available + held.reserved !== ledgerSum) violation(`balance ${held.available} + ${held.reserved} ≠ ledger sum ${ledgerSum}`);
      for (const purchase of purchases.filter((candidate) => candidate.refunded)) {
        const rows = await queryRows<{ remaining: number }>(observer, "SELECT b.remaining AS remaining FROM payments p JOIN credit_buckets b ON b.id = p.bucket_id WHERE p.ref = ?", [purchase.paymentIntent]);
        for (const row of rows) if (Number(row.remaining) !== 0) violation(`${row.remaining} credits of refunded purchase ${purchase.orderId} are still spendable`);
      }
    }

    return { seed: options.seed, store: options.store, operations: steps, faultsInjected, violations, trace };
  } finally {
    await lockReleased;
    for (const instance of instances) instance.alive = false;
    standIn.stop();
    for (const connection of openConnections) await connection.close().catch(() => {});
    await database.drop();
  }
}
