// The simulation's operations other than faults: look-ups of every kind (single, batch, HEAD, keyed,
// stalling, solo ones checked against the balance before them), the clock, sweeps, expiry, grants,
// purchases and what the provider sends about them (payments, full and partial refunds, disputes
// lost and won, subscription renewals), key rotation and revocation, and feed imports.
import { newId } from "../../src/lib/ids";
import { rotateApiKey, revokeApiKey } from "../../src/modules/keys/service";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { PostgresStore } from "../../src/db/postgres-store";
import { stripeEvent } from "../billing/stripe-stand-in";
import { packOrder, queryRows } from "../support/context";
import { FRESH, FRESH_TOO, MISSING, STALE, STALLING, START, type LookUpShape, type Purchase, type SimKey, type SimOrganization } from "./model";
import { storedWatchStates, watchesBehindOffers } from "./watch-checks";
import type { World } from "./world";

export type Operation = [weight: number, name: string, run: () => Promise<void>];

const INVALID = "4006381333932";

/** The offers of the catalogue's products: FRESH and FRESH_TOO stay fresh for a year, STALE is a month old. */
export function catalogue(observedAt: number) {
  const offer = (at: number, price: number) => ({
    merchantId: "m-1",
    merchantName: "Shop",
    priceAmount: price,
    currency: "EUR",
    shippingAmount: null,
    availability: "in_stock" as const,
    condition: "new" as const,
    url: null,
    observedAt: at,
  });
  const price = 150 + (observedAt % 100);
  return [
    { product: { gtin: FRESH, title: "Fresh" }, offer: offer(START + 365 * 86_400_000, price) },
    { product: { gtin: FRESH_TOO, title: "Fresh too" }, offer: offer(START + 365 * 86_400_000, price + 1) },
    { product: { gtin: STALE, title: "Stale" }, offer: offer(START - 30 * 86_400_000, price) },
    { product: { gtin: STALLING, title: "Slow" }, offer: offer(START + 365 * 86_400_000, price) },
  ];
}

/** How many credits a request asks to hold: one per distinct valid GTIN. */
export function creditsAsked(shape: LookUpShape, cost: number): number {
  return cost * new Set(shape.gtins.filter((gtin) => gtin !== INVALID && gtin.length === 14)).size;
}

export function operations(world: World): Operation[] {
  const { faults } = world;

  const newShape = (organization: SimOrganization, stalls: boolean): LookUpShape => {
    const roll = world.random();
    if (roll < 0.1) return { kind: "head", organizationId: organization.id, gtins: [world.pick([FRESH, MISSING])] };
    if (roll < 0.4) {
      const gtins = Array.from({ length: 2 + Math.floor(world.random() * 3) }, () => world.pick([FRESH, FRESH, FRESH_TOO, STALE, MISSING, INVALID]));
      if (stalls) gtins.push(STALLING);
      return { kind: "batch", organizationId: organization.id, gtins };
    }
    return {
      kind: "single",
      organizationId: organization.id,
      gtins: [stalls ? STALLING : world.pick([FRESH, FRESH, FRESH, FRESH_TOO, STALE, MISSING, INVALID])],
    };
  };

  const lookUp = async () => {
    const instance = world.pick(world.alive());
    let organization = world.pick(world.organizations);
    let idempotencyKey: string | null = null;
    let shape: LookUpShape | null = null;
    if (world.chance(0.35)) {
      if (world.idempotencyKeys.size > 0 && world.chance(0.5)) {
        idempotencyKey = world.pick([...world.idempotencyKeys.keys()]);
        shape = world.idempotencyKeys.get(idempotencyKey)!;
        organization = world.organizations.find((candidate) => candidate.id === shape!.organizationId)!;
      } else idempotencyKey = `sim-${world.seed}-${++world.sequence}`;
    }
    const stalls = shape === null && faults.stall && world.chance(0.12);
    shape ??= newShape(organization, stalls);
    if (idempotencyKey !== null && !world.idempotencyKeys.has(idempotencyKey)) world.idempotencyKeys.set(idempotencyKey, shape);
    // Now and then a key that no longer works (rotated or revoked): 401, nothing billed.
    const retired = organization.keys.filter((key) => key.status !== "ACTIVE");
    const key: SimKey = retired.length > 0 && world.chance(0.05) ? world.pick(retired) : world.pick(world.activeKeys(organization));
    const request = await world.send(instance, shape, key, idempotencyKey, stalls);
    if (world.chance(0.5)) await Promise.race([request.settled, Bun.sleep(0)]);
  };

  /**
   * A look-up while nothing else runs: its answer is known from the balance and the key's monthly
   * spending before it. No false 402 or 503, and its creditsConsumed and creditsRemaining are exact.
   */
  const soloLookUp = async () => {
    if (world.inFlight().length > 0 || world.requests.some((request) => request.stalled && request.instance.alive)) return;
    const instance = world.pick(world.alive());
    const organization = world.pick(world.organizations);
    const key = world.pick(world.activeKeys(organization));
    const shape = newShape(organization, false);
    if (shape.kind === "head") shape.kind = "single";
    // Every lease goes back first: one given back while it runs (lapsed and replaced, asked back by
    // a refusal, or on hearing the buckets ran low) would move the balance it is checked against.
    for (const each of world.alive()) if (each.inner instanceof PostgresStore) await each.inner.leases.giveAllBack(each.clock.now());
    const before = await instance.store.getBalance(organization.id, instance.clock.now());
    const [line] = await queryRows<{ spent: number | null }>(world.observer, "SELECT sum(spent) AS spent FROM api_key_monthly_usage WHERE key_id = ?", [
      key.line,
    ]);
    const spent = Number(line?.spent ?? 0);
    // A capped key's reservation rows count against its cap until they end, those of a request whose
    // instance died too (until the stale sweep gives them back).
    const [rows] = await queryRows<{ held: number | null }>(
      world.observer,
      "SELECT sum(r.amount) AS held FROM reservations r JOIN api_keys k ON k.id = r.key_id WHERE coalesce(k.line_id, k.id) = ?",
      [key.line],
    );
    const keyHeld = Number(rows?.held ?? 0);
    const asked = creditsAsked(shape, world.config.creditCost);
    const request = world.sendLookUp(instance, shape, key, null);
    world.trace.push(
      `  solo look-up #${request.id} ${shape.kind} ${shape.gtins.join(",")} on ${instance.name} by ${key.id}: ${before.available} available, ${before.reserved} held, ${spent} spent and ${keyHeld} held of ${key.monthlyLimit ?? "no cap"}, asks ${asked}`,
    );
    await request.settled;
    const answer = request.answer!;
    const violation = (text: string) => world.violations.push(`step ${world.trace.length}: solo look-up #${request.id}: ${text}`);
    const affordable = before.available >= asked && (key.monthlyLimit === null || spent + keyHeld + asked <= key.monthlyLimit);
    if (asked === 0) return;
    if (answer.status === 402 && affordable)
      violation(
        `402 although ${before.available} credits were available and the key had spent ${spent} and held ${keyHeld} of ${key.monthlyLimit ?? "no cap"} (asked ${asked})`,
      );
    if (answer.status === 200 && !affordable)
      violation(
        `200 although ${before.available} credits were available and the key had spent ${spent} and held ${keyHeld} of ${key.monthlyLimit ?? "no cap"} (asked ${asked})`,
      );
    if (answer.status === 503) violation(`503 with nothing failing`);
    if (answer.status === 200 && answer.creditsRemaining !== before.available - answer.creditsConsumed) {
      violation(`creditsRemaining ${answer.creditsRemaining} ≠ ${before.available} available before − ${answer.creditsConsumed} consumed`);
    }
    if (answer.status === 402 && answer.creditsRemaining !== before.available)
      violation(`402 with creditsRemaining ${answer.creditsRemaining}, but ${before.available} were available`);
    const after = await instance.store.getBalance(organization.id, instance.clock.now());
    if (answer.status === 200 && after.available !== answer.creditsRemaining)
      violation(`answered creditsRemaining ${answer.creditsRemaining}, but the balance after it is ${after.available}`);
  };

  const grant = async () => {
    const organization = world.pick(world.organizations);
    const by = faults.cliProcess && world.chance(0.5) ? world.cli : world.pick(world.alive()).store;
    if (by === world.cli) world.injected("CLI process");
    const expiresAt = world.chance(0.5) ? world.pick(world.alive()).clock.now() + world.pick([10_000, 60_000, 3_600_000]) : null;
    const amount = 1 + Math.floor(world.random() * 5);
    world.trace.push(`grant of ${amount} to ${organization.id}${expiresAt === null ? "" : ` expiring at +${expiresAt - world.first.clock.now()} ms`}`);
    await by
      .grantCredits({
        organizationId: organization.id,
        source: "grant",
        type: "grant",
        amount,
        expiresAt,
        description: "sim grant",
        now: world.first.clock.now(),
      })
      .catch((error: unknown) => world.trace.push(`  grant failed: ${error}`));
  };

  const purchase = async () => void (await buyPack(world, world.pick(world.organizations)));

  /** A checkout completed after the provider reported its pack refunded in full: the credits must not stay. */
  const lateCheckout = async () => {
    await purchase();
    const target = world.purchases.at(-1)!;
    world.injected("provider disorder");
    world.trace.push(`refund of ${target.orderId} delivered before its checkout`);
    await refundNow(world, target);
    for (const event of target.pending.splice(0)) await world.deliver(world.pick(world.alive()), target.orderId, event);
  };

  /** A refund (full or partial) or a dispute of a purchase; a dispute opened may later be won (funds reinstated). */
  const reverse = async () => {
    const candidates = world.purchases.filter((candidate) => candidate.refunded < candidate.amount && candidate.dispute !== "won");
    if (candidates.length === 0) return;
    const target = world.pick(candidates);
    const n = ++world.sequence;
    const chargeId = `ch_${target.paymentIntent}`;
    if (target.dispute === "open") {
      const dispute = {
        id: `dp_${target.paymentIntent}`,
        object: "dispute",
        charge: chargeId,
        payment_intent: target.paymentIntent,
        amount: target.amount,
        currency: "eur",
        status: "won",
      };
      target.pending.push({ id: `evt_won_${n}`, payload: stripeEvent(`evt_won_${n}`, "charge.dispute.funds_reinstated", dispute) });
      target.dispute = "won";
      world.trace.push(`dispute of ${target.orderId} won (queued)`);
      return;
    }
    const roll = world.random();
    if (roll < 0.3 && target.refunded === 0) {
      const dispute = {
        id: `dp_${target.paymentIntent}`,
        object: "dispute",
        charge: chargeId,
        payment_intent: target.paymentIntent,
        amount: target.amount,
        currency: "eur",
        status: "needs_response",
      };
      target.pending.push({ id: `evt_dispute_${n}`, payload: stripeEvent(`evt_dispute_${n}`, "charge.dispute.funds_withdrawn", dispute) });
      target.dispute = "open";
      world.trace.push(`dispute of ${target.orderId} opened (queued)`);
      return;
    }
    if (target.dispute !== "none") return;
    // Stripe reports the charge's whole refunded amount so far; a partial refund is a share of it.
    target.refunded = roll < 0.65 ? Math.min(target.amount, target.refunded + 100 * (1 + Math.floor(world.random() * (target.credits - 1)))) : target.amount;
    target.pending.push(refundEvent(target, n));
    world.trace.push(`refund of ${target.refunded} of ${target.amount} of ${target.orderId} queued`);
  };

  const deliverEvent = async () => {
    const waiting = world.purchases.filter((candidate) => candidate.pending.length > 0);
    if (waiting.length === 0) return;
    const target = world.pick(waiting);
    const index = faults.providerDisorder ? Math.floor(world.random() * target.pending.length) : 0;
    const event = target.pending[index]!;
    if (index > 0) world.injected("provider disorder");
    // Stripe may deliver the same event again later: sometimes keep it queued.
    if (!(faults.providerDisorder && world.chance(0.3))) target.pending.splice(index, 1);
    else world.injected("provider disorder");
    await world.deliver(world.pick(world.alive()), target.orderId, event);
  };

  /** A subscription's period paid (its first or a renewal): credits that expire when the period ends. */
  const renewal = async () => {
    const organization = world.pick(world.organizations);
    const n = ++world.sequence;
    const now = world.first.clock.now();
    const credits = 2 + Math.floor(world.random() * 6);
    const periodEnd = Math.floor((now + world.pick([30_000, 120_000, 30 * 86_400_000])) / 1000);
    const invoice = {
      id: `in_sim_${n}`,
      object: "invoice",
      customer: `cus_${organization.id}`,
      billing_reason: world.chance(0.5) ? "subscription_cycle" : "subscription_create",
      amount_paid: credits * 100,
      currency: "eur",
      parent: {
        type: "subscription_details",
        subscription_details: {
          subscription: `sub_${organization.id}`,
          metadata: { organizationId: organization.id, creditsPerPeriod: String(credits), amountPerPeriod: String(credits * 100), planName: "Sim" },
        },
      },
      lines: { object: "list", data: [{ id: `il_${n}`, period: { start: Math.floor(now / 1000), end: periodEnd } }] },
    };
    const event = { id: `evt_invoice_${n}`, payload: stripeEvent(`evt_invoice_${n}`, "invoice.paid", invoice) };
    world.trace.push(`renewal of ${credits} credits for ${organization.id} until +${periodEnd * 1000 - now} ms`);
    await world.deliver(world.pick(world.alive()), organization.id, event);
    // Stripe sends it again at times: granted once.
    if (faults.providerDisorder && world.chance(0.3)) {
      world.injected("provider disorder");
      await world.deliver(world.pick(world.alive()), organization.id, event);
    }
  };

  const rotate = async () => {
    const organization = world.pick(world.organizations);
    const key = world.pick(world.activeKeys(organization));
    const now = world.pick(world.alive()).clock.now();
    const rotated = await rotateApiKey(world.observer, {
      organizationId: organization.id,
      id: key.id,
      createdBy: SYSTEM_USER_ID,
      keyPrefix: world.config.keyPrefix,
      now,
    }).catch((error: unknown) => {
      world.trace.push(`  rotation failed: ${error}`);
      return null;
    });
    if (rotated === null) return;
    key.status = "ROTATED";
    await world.changesHeard();
    organization.keys.push({
      id: rotated.key.id,
      organizationId: organization.id,
      clearKey: rotated.clearKey,
      line: key.line,
      monthlyLimit: key.monthlyLimit,
      status: "ACTIVE",
    });
    world.trace.push(`key ${key.id} rotated into ${rotated.key.id}`);
  };

  const revoke = async () => {
    const organization = world.pick(world.organizations);
    const active = world.activeKeys(organization);
    if (active.length < 2) return;
    const key = world.pick(active);
    // Every instance uses the key first (where instances remember keys, each now has it in memory).
    const shape = (): LookUpShape => ({ kind: "single", organizationId: organization.id, gtins: [FRESH] });
    await Promise.all(world.alive().map((instance) => world.sendLookUp(instance, shape(), key, null).settled));
    await revokeApiKey(world.observer, { organizationId: organization.id, id: key.id, now: world.first.clock.now() });
    // A key is retired for the invariants once every instance has heard so (at once where nothing is remembered).
    await world.changesHeard();
    key.status = "REVOKED";
    world.trace.push(`key ${key.id} revoked`);
    // Then every instance is asked with it: each must refuse it (see the invariants).
    await Promise.all(world.alive().map((instance) => world.sendLookUp(instance, shape(), key, null).settled));
  };

  const feedImport = async () => {
    const by = faults.cliProcess && world.chance(0.5) ? world.cli : world.observer;
    if (by === world.cli) world.injected("CLI process");
    world.trace.push("feed import");
    await by
      .applyFeedRecords(catalogue(world.first.clock.now() + world.sequence), world.first.clock.now())
      .catch((error: unknown) => world.trace.push(`  import failed: ${error}`));
  };

  const watch = () => addWatch(world, world.pick(world.organizations));

  const unwatch = async () => {
    const organization = world.pick(world.organizations);
    const id = organization.watches.splice(Math.floor(world.random() * organization.watches.length), 1)[0];
    if (id !== undefined) await world.observer.deleteWatch(organization.id, id);
  };

  /**
   * The watch evaluator's run on an instance: the queued changes become events, each debited. Each
   * new event starts from the state its watch had stored before the run, and after the run every
   * watch whose product has no change queued, paused or not, holds the product's current state: a
   * paused watch follows the prices without firing, so it never fires later for a change made while
   * it was paused.
   */
  const evaluateWatches = async () => {
    const instance = world.pick(world.alive());
    const stored = await storedWatchStates(world.observer);
    const seen = new Set((await priceChangedEvents(world)).map((event) => event.id));
    const result = await instance.services.watches.tick().catch((error: unknown) => world.trace.push(`  evaluation failed: ${error}`));
    if (typeof result === "object")
      world.trace.push(
        `  ${instance.name} evaluated ${result.changes} change(s): ${result.events} event(s), ${result.paused} paused, ${result.resumed} resumed`,
      );
    if (typeof result === "object")
      for (const text of await watchesBehindOffers(world.observer, instance.clock.now(), world.config.freshnessWindowMs))
        world.violations.push(`step ${world.trace.length}: ${text}`);
    for (const event of await priceChangedEvents(world)) {
      if (seen.has(event.id)) continue;
      const data = JSON.parse(event.payload) as { watchId: string; previous: unknown };
      const before = stored.get(data.watchId);
      if (before === undefined)
        world.violations.push(`step ${world.trace.length}: price.changed ${event.id} for watch ${data.watchId}, unknown before the run`);
      else if (JSON.stringify(data.previous) !== before.state)
        world.violations.push(
          `step ${world.trace.length}: watch ${data.watchId} (${before.status} before the run) fired from ${JSON.stringify(data.previous)}, but its stored state was ${before.state}`,
        );
    }
  };

  /**
   * Look-ups of one organization on one instance, two one after another, then three at once: on
   * PostgreSQL the first ones take a lease, the next spend it, and the three meet in a group commit
   * (the first alone, the other two together: their lease's debit packs them in one row). All five
   * use one key, with no monthly cap when the organization has one (a capped key spends no lease).
   */
  const burst = async () => {
    const instance = world.pick(world.alive());
    const organization = world.pick(world.organizations);
    const send = (key: SimKey) => {
      const shape: LookUpShape = { kind: "single", organizationId: organization.id, gtins: [FRESH] };
      return world.send(instance, shape, key, null, false);
    };
    const key = world.leasableKey(organization);
    for (let count = 0; count < 2; count++) await (await send(key)).settled;
    const together = await Promise.all([send(key), send(key), send(key)]);
    await Promise.all(together.map((request) => request.settled));
  };

  /**
   * Look-ups of one organization on one instance, then at once the full refund of one of its paid
   * packs (whose credits are spent before those that never expire): on PostgreSQL the look-ups
   * spend a lease and their settlement waits, so the refund meets credits of the pack that a lease
   * spent and has not settled, which must not come back to the pack.
   */
  const refundAfterLookUps = async () => {
    const target = world.pick(await paidPurchases(world));
    const organization = world.organizations.find((candidate) => candidate.id === target.organizationId)!;
    const instance = world.pick(world.alive());
    const key = world.leasableKey(organization);
    const shape: LookUpShape = { kind: "single", organizationId: organization.id, gtins: [FRESH] };
    for (let count = 0; count < 3; count++) await (await world.send(instance, shape, key, null, false)).settled;
    await refundNow(world, target);
  };

  return [
    [30, "look-up", lookUp],
    [6, "burst", burst],
    [3, "watch", watch],
    [1, "unwatch", unwatch],
    [4, "evaluate watches", evaluateWatches],
    [5, "solo look-up", soloLookUp],
    [
      8,
      "settle",
      async () => void (await Promise.all(world.requests.filter((request) => request.instance.alive && !request.stalled).map((request) => request.settled))),
    ],
    [6, "advance clock", async () => world.advance(world.pick([1_000, 5_000, 30_000, 61_000]))],
    [
      5,
      "stale sweep",
      async () => {
        const instance = world.pick(world.alive());
        const released = await instance.store
          .releaseStaleReservations(instance.clock.now())
          .catch((error: unknown) => world.trace.push(`  sweep failed: ${error}`));
        world.trace.push(`  ${instance.name} swept ${released}`);
      },
    ],
    [4, "unstall", async () => world.unstall()],
    [4, "grant", grant],
    [
      3,
      "expiry",
      async () => {
        const instance = world.pick(world.alive());
        await instance.store.expireBuckets(instance.clock.now()).catch((error: unknown) => world.trace.push(`  expiry failed: ${error}`));
      },
    ],
    [
      faults.cliProcess ? 3 : 0,
      "cli balance",
      async () => {
        world.injected("CLI process");
        await world.cli.getBalance(world.pick(world.organizations).id, world.first.clock.now());
      },
    ],
    [4, "purchase", purchase],
    [4, "refund or dispute", reverse],
    // SQLite has no lease whose settlement waits: the operation is PostgreSQL's alone.
    [world.store === "postgres" ? 2 : 0, "refund after look-ups", refundAfterLookUps],
    [faults.providerDisorder ? 1 : 0, "late checkout", lateCheckout],
    [6, "deliver event", deliverEvent],
    [2, "renewal", renewal],
    [1, "rotate key", rotate],
    [1, "revoke key", revoke],
    [5, "feed import", feedImport],
  ];
}

/** A price watch of the organization on a catalogue product, any trigger; `below` between the prices feeds give. */
export async function addWatch(world: World, organization: SimOrganization): Promise<void> {
  const trigger = world.pick(["any-change", "price-drop", "below"] as const);
  const now = world.first.clock.now();
  const created = await world.observer.createWatch(
    {
      id: `wch_sim${world.seed}x${++world.sequence}`,
      organizationId: organization.id,
      gtin: world.pick([FRESH, FRESH_TOO, STALLING]),
      merchantId: world.chance(0.5) ? null : "m-1",
      trigger,
      below: trigger === "below" ? { amount: 200, currency: "EUR" } : null,
      now,
    },
    { limit: 10, freshnessWindowMs: world.config.freshnessWindowMs },
  );
  if (created.ok) organization.watches.push(created.watch.id);
  world.trace.push(created.ok ? `watch ${created.watch.id} (${trigger}) for ${organization.id}` : `watch refused: limit ${created.limit}`);
}

/** A pack ordered through Stripe checkout; its `checkout.session.completed` is queued, not delivered. */
export async function buyPack(world: World, organization: SimOrganization): Promise<Purchase> {
  const n = ++world.sequence;
  const credits = 3 + Math.floor(world.random() * 8);
  const bought: Purchase = {
    organizationId: organization.id,
    orderId: newId("ord", START + n),
    sessionId: `cs_sim_${n}`,
    paymentIntent: `pi_sim_${n}`,
    credits,
    amount: credits * 100,
    pending: [],
    refunded: 0,
    dispute: "none",
  };
  // Valid 30 days, so its credits are spent before those that never expire (and refunds meet held credits).
  await world.observer.createOrder({
    ...packOrder({
      id: bought.orderId,
      organizationId: organization.id,
      credits,
      amount: bought.amount,
      now: world.first.clock.now(),
      provider: "stripe",
      providerRef: bought.sessionId,
    }),
    validityDays: 30,
  });
  const session = {
    id: bought.sessionId,
    object: "checkout.session",
    mode: "payment",
    client_reference_id: bought.orderId,
    payment_intent: bought.paymentIntent,
    amount_total: bought.amount,
    currency: "eur",
    payment_status: "paid",
    status: "complete",
    metadata: { orderId: bought.orderId, organizationId: organization.id },
  };
  bought.pending.push({ id: `evt_paid_${n}`, payload: stripeEvent(`evt_paid_${n}`, "checkout.session.completed", session) });
  world.purchases.push(bought);
  world.trace.push(`purchase ${bought.orderId} of ${credits} credits by ${organization.id}`);
  return bought;
}

/** The purchases paid and neither refunded nor disputed; when there are none, one is bought and paid now. */
export async function paidPurchases(world: World): Promise<Purchase[]> {
  const paid: Purchase[] = [];
  for (const purchase of world.purchases)
    if (purchase.refunded === 0 && purchase.dispute === "none" && (await world.observer.hasPayment(purchase.paymentIntent))) paid.push(purchase);
  if (paid.length > 0) return paid;
  const bought = await buyPack(world, world.pick(world.organizations));
  for (const event of bought.pending.splice(0)) await world.deliver(world.pick(world.alive()), bought.orderId, event);
  return [bought];
}

/** The provider reports `target` refunded in full, delivered at once to a live instance. */
export async function refundNow(world: World, target: Purchase): Promise<void> {
  target.refunded = target.amount;
  await world.deliver(world.pick(world.alive()), target.orderId, refundEvent(target, ++world.sequence));
}

/** The provider's `charge.refunded` event (the `n`th of the run) for what `target` has had refunded so far. */
function refundEvent(target: Purchase, n: number): { id: string; payload: string } {
  const charge = {
    id: `ch_${target.paymentIntent}`,
    object: "charge",
    payment_intent: target.paymentIntent,
    amount: target.amount,
    amount_refunded: target.refunded,
    refunded: target.refunded === target.amount,
    currency: "eur",
  };
  return { id: `evt_refund_${n}`, payload: stripeEvent(`evt_refund_${n}`, "charge.refunded", charge) };
}

async function priceChangedEvents(world: World): Promise<Array<{ id: string; payload: string }>> {
  return queryRows<{ id: string; payload: string }>(world.observer, "SELECT id, payload FROM webhook_events WHERE type = 'price.changed'");
}
