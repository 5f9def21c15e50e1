// A seeded, deterministic simulation of the money paths: random sequences of look-ups (single,
// batch, HEAD, keyed, stalling) by several organizations' keys (about half of them capped), grants,
// purchases, refunds, disputes, renewals, expiries, sweeps, key rotations and feed imports against
// one or two service instances on one database, with faults injected between and inside them, and
// the money invariants checked after every step. The same seed makes the same operations, so a
// failing seed replays (on PostgreSQL the timing of connection faults may differ; the trace records
// every answer). The model, operations, faults and invariants live in the modules beside this one.
import Stripe from "stripe";
import { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID, STALE_RESERVATION_MS, type Store } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";
import { startStripeStandIn, type StripeStandIn } from "../billing/stripe-stand-in";
import { faultOperations, installWriteFault, setWriteFault } from "./faults";
import { checkInvariants } from "./invariants";
import {
  ALL_FAULTS,
  createDatabase,
  DEFAULT_POSTGRES_URL,
  openStore,
  prng,
  START,
  type Faults,
  type SimOrganization,
  type SimulationReport,
  type StoreKind,
} from "./model";
import { addWatch, catalogue, operations } from "./operations";
import { STRIPE, World } from "./world";

export { ALL_FAULTS, DEFAULT_POSTGRES_URL, prng, type Faults, type SimulationReport, type StoreKind } from "./model";

/** Steps per seed unless told otherwise. */
export const DEFAULT_STEPS = 40;

/** `trace`, when given, receives the trace as it is written (a watchdog can print it). */
export async function simulate(options: {
  seed: number;
  store: StoreKind;
  steps?: number;
  faults?: Partial<Faults>;
  postgresUrl?: string;
  trace?: string[];
}): Promise<SimulationReport> {
  const faults: Faults = { ...ALL_FAULTS, ...options.faults };
  if (options.store === "sqlite") faults.clockSkew = false; // one serve per SQLite file: a second instance is refused
  if (options.store === "sqlite") faults.connectionLost = false;
  if (options.store === "postgres") faults.lockHeld = false;
  if (options.store === "postgres") faults.secondServe = false;
  const random = prng(options.seed);

  const database = await createDatabase(options.store, options.postgresUrl ?? DEFAULT_POSTGRES_URL);
  // The harness's own connections (the observer's, the operator CLI's on PostgreSQL) carry another
  // application_name than the instances': the connection fault ends only the instances'.
  const observer = await openStore(options.store === "postgres" ? { ...database, url: harnessURL(database.url) } : database, options.store);
  const cli = options.store === "sqlite" ? await openStore(database, "sqlite") : observer;
  const standIn: StripeStandIn = startStripeStandIn();
  const stripe = new Stripe(STRIPE.key, { host: "127.0.0.1", port: standIn.port, protocol: "http", maxNetworkRetries: 0 });
  const world = new World(options.seed, options.store, faults, random, database, observer, cli, stripe, options.trace);
  world.openConnections.push(observer);
  if (cli !== observer) world.openConnections.push(cli);

  try {
    await installWriteFault(observer);
    const now = START;
    await observer.ensureSystemUser(now);
    // Two or three organizations of two keys each; the second key of each is capped.
    const count = 2 + Math.floor(random() * 2);
    for (let index = 0; index < count; index++) {
      const created = await observer.createOrganization({ name: `Sim Org ${index}`, now });
      const organization: SimOrganization = { id: created.id, keys: [], lowCreditThreshold: 2 + Math.floor(random() * 4), watches: [] };
      await observer.setLowCreditThreshold(organization.id, organization.lowCreditThreshold);
      for (const monthlyLimit of [null, world.pick([3, 6, 12])]) {
        const key = await createApiKey(observer, {
          organizationId: organization.id,
          name: `sim ${index}`,
          createdBy: SYSTEM_USER_ID,
          keyPrefix: world.config.keyPrefix,
          now,
          monthlyCreditLimit: monthlyLimit,
        });
        organization.keys.push({ id: key.key.id, organizationId: organization.id, clearKey: key.clearKey, line: key.key.id, monthlyLimit, status: "ACTIVE" });
      }
      await observer.grantCredits({
        organizationId: organization.id,
        source: "grant",
        type: "grant",
        amount: 5 + Math.floor(random() * 10),
        expiresAt: null,
        description: "seed grant",
        now,
      });
      world.organizations.push(organization);
    }
    await observer.applyFeedRecords(catalogue(now), now);

    world.first = await world.startInstance("A", START);
    if (faults.clockSkew) await world.startInstance("B", START + 61_000);
    for (const organization of world.organizations) await addWatch(world, organization);

    const all = [...operations(world), ...faultOperations(world)];
    const total = all.reduce((sum, [weight]) => sum + weight, 0);
    const steps = options.steps ?? DEFAULT_STEPS;
    const operationCounts: Record<string, number> = {};
    for (let step = 0; step < steps; step++) {
      let roll = random() * total;
      const operation = all.find(([weight]) => (roll -= weight) < 0)!;
      world.trace.push(`${step}: ${operation[1]}`);
      operationCounts[operation[1]] = (operationCounts[operation[1]] ?? 0) + 1;
      const started = performance.now();
      if (!(await withinDeadline(operation[2]()))) {
        world.violations.push(`step ${step} (${operation[1]}) did not finish within ${STEP_DEADLINE_MS / 1000} s: a request or a fault hangs`);
        break;
      }
      const took = performance.now() - started;
      if (took >= 250) world.trace.push(`  (took ${Math.round(took)} ms)`);
      await checkInvariants(world, false);
      if (world.violations.length > 0) break;
    }

    if (world.violations.length === 0 && !(await withinDeadline(settle(world, observer)))) {
      world.violations.push(`the run did not settle within ${STEP_DEADLINE_MS / 1000} s: a request or a fault hangs`);
    }
    return {
      seed: options.seed,
      store: options.store,
      operations: steps,
      faultsInjected: [...world.faultCounts.values()].reduce((sum, count) => sum + count, 0),
      operationCounts,
      faultCounts: Object.fromEntries(world.faultCounts),
      leaseCounts: leaseCounts(world),
      violations: world.violations,
      trace: world.trace,
    };
  } finally {
    await withinDeadline(world.lockReleased);
    for (const instance of world.instances) {
      instance.alive = false;
      instance.serveLock?.release();
    }
    standIn.stop();
    for (const connection of world.openConnections) await connection.close().catch(() => {});
    await database.drop();
  }
}

/** What the instances' credit leases went through (PostgreSQL), summed. */
function leaseCounts(world: World): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const instance of world.instances)
    if (instance.inner instanceof PostgresStore)
      for (const [name, count] of Object.entries(instance.inner.leases.counts)) counts[name] = (counts[name] ?? 0) + count;
  return counts;
}

/**
 * Lets everything settle, then checks the end state: the provider sends what it still has, stalls
 * open, locks and faults end, and once the stale age has passed a sweep returns whatever a dead
 * instance held.
 */
async function settle(world: World, observer: Store): Promise<void> {
  const writeFault = (on: boolean) => setWriteFault(observer, on);
  await world.quiesce(writeFault);
  for (const purchase of world.purchases)
    for (const event of purchase.pending.splice(0)) await world.deliver(world.pick(world.alive()), purchase.orderId, event);
  await world.quiesce(writeFault);
  await world.advance(STALE_RESERVATION_MS + 1_000);
  for (const instance of world.alive()) await instance.store.releaseStaleReservations(instance.clock.now());
  // Expired credits count in the ledger until the expiry job writes them off; the balance leaves
  // them out. The instance whose clock runs furthest ahead writes off what any instance sees expired.
  const latest = world.alive().reduce((ahead, instance) => (instance.clock.now() > ahead.clock.now() ? instance : ahead));
  await latest.store.expireBuckets(latest.clock.now());
  await checkInvariants(world, true);
}

/** Each step, and the settling, gets this long: a hang is a finding, not a run that never ends. */
const STEP_DEADLINE_MS = 120_000;

async function withinDeadline(work: Promise<unknown>): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), STEP_DEADLINE_MS);
  });
  try {
    return await Promise.race([work.then(() => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}

function harnessURL(url: string): string {
  const harness = new URL(url);
  harness.searchParams.set("application_name", `${harness.searchParams.get("application_name")}.harness`);
  return harness.toString();
}
