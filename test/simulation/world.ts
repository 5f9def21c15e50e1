// The running simulation: its database, instances, organizations and keys, the requests it sent and
// the provider events it holds, and the helpers every operation uses (send a look-up, deliver an
// event, let stalled requests go, wait for everything to settle).
import { AsyncLocalStorage } from "node:async_hooks";
import type Stripe from "stripe";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { PostgresStore } from "../../src/db/postgres-store";
import type { LeasePolicy } from "../../src/db/ledger/postgres-leases";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { lockDatabaseForServing } from "../../src/db/sqlite-serve-lock";
import type { Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createServices } from "../../src/services";
import { WEBHOOK_SECRET } from "../billing/stripe-stand-in";
import { ageReservations, changesHeard, queryRows, type TestDatabase } from "../support/context";
import {
  STALLING,
  type Answer,
  type Faults,
  type Instance,
  type LookUpShape,
  type Purchase,
  type SentRequest,
  type SimKey,
  type SimOrganization,
  type StoreKind,
  openStore,
} from "./model";

export const STRIPE = { key: "sk_test_standin" };

/** See startInstance. */
const SIMULATION_LEASES: LeasePolicy = { share: 2, minCredits: 1, maxCredits: 6, ms: 10_000, marginMs: 100 };

export class World {
  readonly trace: string[];
  readonly violations: string[] = [];
  /** Faults injected, by class. */
  readonly faultCounts = new Map<string, number>();
  readonly instances: Instance[] = [];
  readonly openConnections: Store[] = [];
  readonly requests: SentRequest[] = [];
  readonly purchases: Purchase[] = [];
  readonly organizations: SimOrganization[] = [];
  /** Each Idempotency-Key used, with the request it stands for (a retry sends the same). */
  readonly idempotencyKeys = new Map<string, LookUpShape>();
  sequence = 0;
  /** Simulated time passed since the start, by every clock (and, on PostgreSQL, by the database's). */
  elapsed = 0;
  /** Resolves when the lock holder (SQLite) has let go. */
  lockReleased: Promise<void> = Promise.resolve();
  /** The instance whose clock is the reference (every clock advances together); kept after it crashes. */
  first!: Instance;
  readonly config = loadConfig({
    PRICE_ENV: "production",
    LOG_LEVEL: "error",
    RATE_LIMIT: "1000000/s",
    BILLING_PROVIDER: "stripe",
    STRIPE_SECRET_KEY: STRIPE.key,
    STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
  });
  private readonly logger = createLogger({ level: "error", write: () => {} });

  constructor(
    readonly seed: number,
    readonly store: StoreKind,
    readonly faults: Faults,
    readonly random: () => number,
    readonly database: TestDatabase,
    readonly observer: Store,
    readonly cli: Store,
    readonly stripe: Stripe,
    trace: string[] = [],
  ) {
    this.trace = trace;
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.random() * items.length)]!;
  }

  chance(p: number): boolean {
    return this.random() < p;
  }

  alive(): Instance[] {
    return this.instances.filter((instance) => instance.alive);
  }

  /**
   * Time passes: every instance's clock moves on, and on PostgreSQL the rows dated by the database's
   * clock (reservations, Idempotency-Key claims) age as much.
   */
  async advance(ms: number): Promise<void> {
    for (const instance of this.instances) {
      instance.clock.advance(ms);
      if (instance.inner instanceof PostgresStore) instance.inner.leases.timePassed(ms);
    }
    this.elapsed += ms;
    if (this.store !== "postgres") return;
    await ageReservations(this.observer, ms);
    await queryRows(this.observer, "UPDATE idempotency_records SET created_at = created_at - ? WHERE status = 'in-progress'", [ms]);
  }

  activeKeys(organization: SimOrganization): SimKey[] {
    return organization.keys.filter((key) => key.status === "ACTIVE");
  }

  /** An uncapped active key of the organization when it has one (its look-ups may be debited from a credit lease), else any active key. */
  leasableKey(organization: SimOrganization): SimKey {
    const uncapped = this.activeKeys(organization).filter((key) => key.monthlyLimit === null);
    return this.pick(uncapped.length > 0 ? uncapped : this.activeKeys(organization));
  }

  /** Requests still running on a live instance. */
  inFlight(): SentRequest[] {
    return this.requests.filter((request) => request.answer === null && request.instance.alive);
  }

  async startInstance(name: string, now: number): Promise<Instance> {
    // One serve per SQLite file: the replacement of a crashed instance takes the lock it left.
    const serveLock = this.store === "sqlite" ? lockDatabaseForServing(this.database.url) : null;
    const inner = await openStore(this.database, this.store);
    this.openConnections.push(inner);
    // In two seeds of three a debit waits for PostgreSQL only 0.5 s, so the database-away fault leaves
    // debits in doubt (answered 503, maybe committed) and the checks see their answers.
    if (inner instanceof PostgresStore && this.seed % 3 !== 1) inner.lostConnectionPatienceMs = 500;
    // Leases of a few credits that lapse within seconds: the simulation's balances are small, and
    // its look-ups should meet leases taken, spent, lapsed, lost and given back.
    if (inner instanceof PostgresStore) inner.leases.policy = SIMULATION_LEASES;
    // In half the seeds a settlement starts once 1 to 3 look-ups wait, so settlements run beside
    // debits, kills and lost connections as they do under load.
    if (inner instanceof PostgresStore && this.seed % 2 === 0) inner.leases.settlement = { ms: 500, lookUps: 1 + (this.seed % 3) };
    const clock = new FakeClock(now);
    const instance = { name, clock, alive: true, stalls: [], inner, serveLock } as unknown as Instance;
    instance.store = instanceStore(inner, () => instance);
    const services = createServices({ config: this.config, store: instance.store, clock, logger: this.logger, stripe: this.stripe });
    instance.services = services;
    instance.app = createApp(services);
    await instance.store.recoverInFlightWork(clock.now());
    this.instances.push(instance);
    return instance;
  }

  /** A dead process: its calls never return, its SQLite connection (and serve lock) go with it. */
  kill(victim: Instance): void {
    victim.alive = false;
    // A dead SQLite process writes nothing more: the group commit and retries queued inside its
    // store die with it. On PostgreSQL a statement already sent may still commit, which the store's fences are for.
    if (victim.inner instanceof SQLiteStore) victim.inner.connection.close(false);
    // Nor does it hear notices: asked for its leases back, a dead instance gives nothing.
    if (victim.inner instanceof PostgresStore) {
      void victim.inner.changes.close();
      // Nor does it settle its leases' usage: the next sweep of a live instance does.
      victim.inner.leases.stopSettling();
    }
    victim.serveLock?.release();
  }

  sendLookUp(instance: Instance, shape: LookUpShape, key: SimKey, idempotencyKey: string | null, onStall: (() => void) | null = null): SentRequest {
    const blockedBy =
      idempotencyKey === null ? [] : this.requests.filter((other) => other.idempotencyKey === idempotencyKey && other.stalled && other.instance.alive);
    const request: SentRequest = {
      id: ++this.sequence,
      shape,
      key,
      retiredAtSend: key.status !== "ACTIVE",
      idempotencyKey,
      instance,
      stalled: false,
      onStall,
      answer: null,
      settled: Promise.resolve(),
      sentAt: this.elapsed,
      answeredAt: Number.NaN,
      blockedBy,
      stillBlockedBy: [],
    };
    const headers: Record<string, string> = { authorization: `Bearer ${key.clearKey}` };
    if (idempotencyKey !== null) headers["idempotency-key"] = idempotencyKey;
    const http =
      shape.kind === "batch"
        ? new Request("http://localhost/api/v1/products/prices", {
            method: "POST",
            headers: { ...headers, "content-type": "application/json" },
            body: JSON.stringify({ gtins: shape.gtins }),
          })
        : new Request(`http://localhost/api/v1/products/${shape.gtins[0]}/price`, { method: shape.kind === "head" ? "HEAD" : "GET", headers });
    // The stall gate knows which request reads through this context, so only the one chosen stalls.
    request.settled = sending
      .run(request, () => instance.app.handle(http))
      .then(async (response) => {
        const text = await response.text().catch(() => "");
        let body: {
          detail?: string;
          meta?: { requestId?: string; creditsConsumed?: number; creditsRemaining?: number; billable?: boolean; reason?: string };
          data?: unknown;
        } = {};
        try {
          body = text === "" ? {} : JSON.parse(text);
        } catch {}
        const items = Array.isArray(body.data)
          ? (body.data as Array<{ gtin: string; reason: string }>)
          : body.meta?.reason === undefined
            ? []
            : [{ gtin: shape.gtins[0]!, reason: body.meta.reason }];
        const answer: Answer = {
          status: response.status,
          requestId: body.meta?.requestId ?? response.headers.get("x-request-id"),
          creditsConsumed: body.meta?.creditsConsumed ?? 0,
          creditsRemaining: body.meta?.creditsRemaining ?? null,
          billable: body.meta?.billable ?? false,
          debitInDoubt: response.status === 503 && (body.detail ?? "").includes("whether it was billed is not known"),
          replayed: response.headers.get("idempotent-replayed") === "true",
          freshItems: new Set(items.filter((item) => item.reason === "fresh-offer").map((item) => item.gtin)).size,
        };
        request.answer = answer;
        request.answeredAt = this.elapsed;
        request.stillBlockedBy = request.blockedBy.filter((other) => other.answer === null && other.instance.alive);
        this.trace.push(
          `  answer #${request.id} ${response.status} consumed=${answer.creditsConsumed} remaining=${answer.creditsRemaining ?? "-"} ${answer.requestId}${answer.replayed ? " (replayed)" : ""}${answer.debitInDoubt ? " (debit in doubt)" : ""}`,
        );
      });
    this.requests.push(request);
    return request;
  }

  /**
   * Sends a look-up; one chosen to stall waits at the stall gate once it reaches its product read
   * (a 402 or 409 never does). Resolves when it has stalled or been answered, or after a tick.
   */
  async send(instance: Instance, shape: LookUpShape, key: SimKey, idempotencyKey: string | null, stall: boolean): Promise<SentRequest> {
    if (this.alive().some((other) => other.clock.now() < instance.clock.now())) this.injected("clock skew");
    let arrived!: () => void;
    const stalledAt = new Promise<void>((resolve) => (arrived = resolve));
    const request = this.sendLookUp(instance, shape, key, idempotencyKey, stall ? arrived : null);
    this.trace.push(
      `look-up #${request.id} ${shape.kind} ${shape.gtins.join(",")} on ${instance.name} by ${key.id}${key.monthlyLimit === null ? "" : ` (cap ${key.monthlyLimit})`}${key.status === "ACTIVE" ? "" : ` (${key.status})`} key=${idempotencyKey ?? "-"}${stall ? " (to stall)" : ""}`,
    );
    if (stall) {
      request.stalled = await Promise.race([stalledAt.then(() => true), request.settled.then(() => false)]);
      if (request.stalled) {
        this.trace.push(`  #${request.id} stalls`);
        this.injected("stall");
      }
    }
    return request;
  }

  async deliver(instance: Instance, label: string, event: { id: string; payload: string }): Promise<void> {
    const signature = await this.stripe.webhooks.generateTestHeaderStringAsync({ payload: event.payload, secret: WEBHOOK_SECRET });
    const response = await instance.app.handle(
      new Request("http://localhost/api/v1/webhooks/stripe", {
        method: "POST",
        headers: { "content-type": "application/json", "stripe-signature": signature },
        body: event.payload,
      }),
    );
    this.trace.push(`  webhook ${event.id} for ${label} → ${response.status}`);
  }

  /**
   * Waits until every live instance has heard the changes committed so far (on PostgreSQL an
   * instance remembers keys and balances, kept true by change notifications; see ChangeListener).
   */
  async changesHeard(): Promise<void> {
    await Promise.all(this.alive().map((instance) => changesHeard(instance.inner)));
  }

  /** Counts a fault of the given class as injected. */
  injected(fault: string): void {
    this.faultCounts.set(fault, (this.faultCounts.get(fault) ?? 0) + 1);
  }

  unstall(): void {
    for (const instance of this.instances) {
      for (const open of instance.stalls.splice(0)) open();
    }
    for (const request of this.requests) {
      request.stalled = false;
      request.onStall = null;
    }
  }

  async quiesce(setWriteFault: (on: boolean) => Promise<void>): Promise<void> {
    this.unstall();
    await this.lockReleased;
    await setWriteFault(false);
    await Promise.all(this.requests.filter((request) => request.instance.alive).map((request) => request.settled));
    // A release whose own write failed is retried in the background (src/modules/products/service.ts):
    // wait until nothing is held, or what is held stays put for 0.4 s (a dead instance's reservation
    // rows, which only the stale sweep gives back).
    let held = await this.heldAnywhere();
    for (let waited = 0, still = 0; held > 0 && waited < 2_000 && still < 400; waited += 50) {
      await Bun.sleep(50);
      const now = await this.heldAnywhere();
      still = now === held ? still + 50 : 0;
      held = now;
    }
  }

  /** Credits held by requests, summed over every live instance and organization (holds in memory and reservation rows). */
  async heldAnywhere(): Promise<number> {
    let held = 0;
    for (const instance of this.alive())
      for (const organization of this.organizations) held += (await instance.store.getBalance(organization.id, instance.clock.now())).reserved;
    return held;
  }
}

/** The look-up whose work is running, for the stall gate. */
const sending = new AsyncLocalStorage<SentRequest>();

/**
 * The store an instance uses: a cut-off switch (a crashed instance's calls never return, like a dead
 * process's) and a stall gate on the product reads of STALLING (a request held inside its work).
 */
function instanceStore(inner: Store, instance: () => Instance): Store {
  return new Proxy(inner, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const owner = instance();
        if (!owner.alive) return new Promise(() => {});
        const stalls =
          (property === "findProductWithOffers" && args[0] === STALLING) ||
          (property === "findProductsWithOffers" && (args[0] as readonly string[]).includes(STALLING));
        const request = sending.getStore();
        const reached = stalls ? request?.onStall : null;
        if (request && reached) {
          request.onStall = null;
          return new Promise((resolve, reject) => {
            owner.stalls.push(() => (value as (...args: unknown[]) => Promise<unknown>).apply(target, args).then(resolve, reject));
            reached();
          });
        }
        return (value as (...args: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as Store;
}
