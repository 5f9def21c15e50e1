import type { Database } from "bun:sqlite";
import { and, eq, gt, isNull, lte, or, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { utcMonth } from "../../lib/clock";
import { newId } from "../../lib/ids";
import type { SQLiteIdempotency } from "../idempotency/sqlite";
import * as schema from "../schema/sqlite";
import { isLocked, whileLocked } from "../sqlite-locked";
import { BILLED_REASON, splitAllocations } from "../store";
import type { Balance, LedgerTransaction, Reservation, Store, UsageRecord } from "../store";
import { balanceEventData, balanceEventTypes, type NewWebhookEvent } from "../webhooks/records";
import { fefoOrder, takeInOrder } from "./allocation";
import { type Debit, type LockedState, planDebits } from "./debit-plan";
import { writePlanSQLite } from "./sqlite-plan";

const { organizations, creditBuckets, creditTransactions, idempotencyRecords } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

const bucketColumns = {
  id: creditBuckets.id,
  organizationId: creditBuckets.organizationId,
  source: creditBuckets.source,
  granted: creditBuckets.granted,
  remaining: creditBuckets.remaining,
  expiresAt: creditBuckets.expiresAt,
  createdAt: creditBuckets.createdAt,
};

// Soonest-expiring first; buckets that never expire last; then oldest first.
const FEFO = [sql.raw(fefoOrder("credit_buckets"))] as const;

/**
 * What the SQLite store lends the money path: its write transactions, its cache check and the
 * caches of spendable buckets and key lines' limits and spending (the store's own maps, cleared with
 * the other read caches), the Idempotency-Key claims that fence a debit, and the webhook outbox.
 */
export interface SQLiteHoldsDeps {
  write<T>(work: (db: DB) => T): T;
  writeKeepingCaches<T>(work: () => T): T;
  syncCaches(scope?: "this connection" | "all connections"): void;
  bucketCache: Map<string, Array<{ id: string; remaining: number; expiresAt: number | null }>>;
  keyLimitCache: Map<string, number | null>;
  keySpentCache: Map<string, { month: string; spent: number }>;
  idempotency: SQLiteIdempotency;
  emit(events: NewWebhookEvent[]): void;
}

/**
 * The money path on SQLite: the ledger's running sum and its one writer (appendLedger), expiry
 * write-offs, credits held in memory by requests in flight (per bucket and per key line, under the
 * key lines' monthly limits), the group commit that debits them, releases with the refunds they owe,
 * and balances.
 */
export class SQLiteHolds {
  private readonly bucketCache: SQLiteHoldsDeps["bucketCache"];
  private readonly keyLimitCache: SQLiteHoldsDeps["keyLimitCache"];
  private readonly keySpentCache: SQLiteHoldsDeps["keySpentCache"];
  private readonly idempotency: SQLiteIdempotency;
  private readonly webhooks: { emit(events: NewWebhookEvent[]): void };

  constructor(
    private readonly database: Database,
    private readonly db: DB,
    private readonly deps: SQLiteHoldsDeps,
  ) {
    this.bucketCache = deps.bucketCache;
    this.keyLimitCache = deps.keyLimitCache;
    this.keySpentCache = deps.keySpentCache;
    this.idempotency = deps.idempotency;
    this.webhooks = { emit: (events) => deps.emit(events) };
  }

  private write<T>(work: (db: DB) => T): T {
    return this.deps.write(work);
  }

  private writeKeepingCaches<T>(work: () => T): T {
    return this.deps.writeKeepingCaches(work);
  }

  private syncCaches(scope?: "this connection" | "all connections"): void {
    this.deps.syncCaches(scope);
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  /** The credits requests in flight hold in a bucket. */
  heldIn(bucketId: string): number {
    return this.holds.get(bucketId) ?? 0;
  }

  private readonly moveLedgerStatement = this.lazy(() =>
    this.db
      .update(organizations)
      .set({ ledgerBalance: sql`${organizations.ledgerBalance} + ${sql.placeholder("amount")}` })
      .where(eq(organizations.id, sql.placeholder("organizationId")))
      .returning({ ledgerBalance: organizations.ledgerBalance, lowCreditThreshold: organizations.lowCreditThreshold })
      .prepare(),
  );

  private readonly insertTransaction = this.lazy(() =>
    this.db
      .insert(creditTransactions)
      .values({
        id: sql.placeholder("id"),
        organizationId: sql.placeholder("organizationId"),
        type: sql.placeholder("type"),
        amount: sql.placeholder("amount"),
        balanceAfter: sql.placeholder("balanceAfter"),
        bucketId: sql.placeholder("bucketId"),
        keyId: sql.placeholder("keyId"),
        requestId: sql.placeholder("requestId"),
        gtin: sql.placeholder("gtin"),
        description: sql.placeholder("description"),
        createdAt: sql.placeholder("createdAt"),
      })
      .prepare(),
  );

  /**
   * Appends a ledger row and moves the running sum; the only way credits enter or leave the ledger.
   * A row that lowers the sum across the low-credit threshold or to zero writes its balance events
   * too. Returns the sum after the row.
   */
  appendLedger(
    row: Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> &
      Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>,
  ): number {
    const { ledgerBalance: balanceAfter, lowCreditThreshold } = this.moveLedger(row.organizationId, row.amount);
    if (row.amount < 0) this.emitBalanceEvents(row.organizationId, balanceAfter - row.amount, balanceAfter, lowCreditThreshold, row.createdAt);
    this.insertTransaction().run({
      id: newId("txn", row.createdAt),
      bucketId: null,
      keyId: null,
      requestId: null,
      gtin: null,
      ...row,
      balanceAfter,
    });
    return balanceAfter;
  }

  private emitBalanceEvents(organizationId: string, before: number, after: number, threshold: number | null, now: number): void {
    const types = balanceEventTypes(before, after, threshold);
    if (types.length === 0) return;
    this.webhooks.emit(
      types.map((type) => ({ id: newId("msg", now), organizationId, type, data: balanceEventData(type, organizationId, after, threshold), createdAt: now })),
    );
  }

  private readonly adjustBucket = this.lazy(() =>
    this.db
      .update(creditBuckets)
      .set({ remaining: sql`${creditBuckets.remaining} + ${sql.placeholder("delta")}` })
      .where(eq(creditBuckets.id, sql.placeholder("bucketId")))
      .prepare(),
  );

  /** Adds `amount` to the organization's running ledger sum and returns the new sum (the row's balanceAfter) and the low-credit threshold. */
  private moveLedger(organizationId: string, amount: number): { ledgerBalance: number; lowCreditThreshold: number | null } {
    const row = this.moveLedgerStatement().get({ organizationId, amount });
    if (row === undefined) throw new Error(`organization ${organizationId} does not exist`);
    return row;
  }

  /**
   * Writes off the expired buckets (of one organization, or all) with an `expiry` ledger row each.
   * Credits held by a request in flight stay in their bucket until it commits or releases; a
   * later sweep writes off what a release gives back.
   */
  writeOffExpired(organizationId: string | null, now: number): number {
    const expired = this.db
      .select({ id: creditBuckets.id, organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
      .from(creditBuckets)
      .where(
        and(
          organizationId === null ? undefined : eq(creditBuckets.organizationId, organizationId),
          gt(creditBuckets.remaining, 0),
          lte(creditBuckets.expiresAt, now),
        ),
      )
      .all();
    let written = 0;
    for (const bucket of expired) {
      const amount = bucket.remaining - (this.holds.get(bucket.id) ?? 0);
      if (amount <= 0) continue;
      this.adjustBucket().run({ bucketId: bucket.id, delta: -amount });
      this.appendLedger({
        organizationId: bucket.organizationId,
        type: "expiry",
        amount: -amount,
        bucketId: bucket.id,
        description: "Expired credits written off",
        createdAt: now,
      });
      written++;
    }
    return written;
  }

  private readonly bucketsWithCredits = this.lazy(() =>
    this.db
      .select({ id: creditBuckets.id, remaining: creditBuckets.remaining, expiresAt: creditBuckets.expiresAt })
      .from(creditBuckets)
      .where(and(eq(creditBuckets.organizationId, sql.placeholder("organizationId")), gt(creditBuckets.remaining, 0)))
      .orderBy(...FEFO)
      .prepare(),
  );

  // Reservations live in memory: one `serve` process owns a SQLite file, JavaScript runs one request
  // at a time between awaits, and a hold is taken synchronously after reading the buckets, so two
  // requests can never hold the same credit. A crash loses only holds, never credits: buckets are
  // debited only when a usage row is written, in the same transaction.
  private readonly holds = new Map<string, number>();

  private readonly heldReservations = new Map<
    string,
    { organizationId: string; amount: number; allocations: Array<{ bucketId: string; amount: number }>; keyId: string | null; requestId: string }
  >();

  /** Credits held per key line by its requests in flight (for monthly credit limits). */
  private readonly keyHolds = new Map<string, number>();

  private readonly keyLimitById = this.lazy(() =>
    this.database.prepare<{ limit: number | null }, [string]>(
      "SELECT monthly_credit_limit AS \"limit\" FROM api_keys WHERE id = ?1 OR line_id = ?1 ORDER BY status = 'ACTIVE' DESC, created_at DESC LIMIT 1",
    ),
  );

  private readonly keySpentById = this.lazy(() =>
    this.database.prepare<{ spent: number }, [string, string]>("SELECT spent FROM api_key_monthly_usage WHERE key_id = ?1 AND month = ?2"),
  );

  private readonly keyLines = new Map<string, string>();

  private readonly keyLineById = this.lazy(() =>
    this.database.prepare<{ line: string }, [string]>("SELECT coalesce(line_id, id) AS line FROM api_keys WHERE id = ?1"),
  );

  // Invariant: a monthly credit limit fences a key's line (the key and its rotations): the line's
  // spending is one counter, its requests in flight hold against it, and its limit is the live key's,
  // so neither a rotation nor a request of the old key still running frees room under the limit.
  /** The line of a key: fixed when the key is made, so it is cached for good. */
  keyLineOf(keyId: string): string {
    let line = this.keyLines.get(keyId);
    if (line === undefined) {
      line = this.keyLineById().get(keyId)?.line ?? keyId;
      this.keyLines.set(keyId, line);
    }
    return line;
  }

  /** The line's monthly credit limit as stored now (the caches are exact: any change clears them). */
  private keyLimitOf(line: string): number | null {
    let limit = this.keyLimitCache.get(line);
    if (limit === undefined) {
      limit = this.keyLimitById().get(line)?.limit ?? null;
      this.keyLimitCache.set(line, limit);
    }
    return limit;
  }

  /** What the line's committed debits of `month` add up to. */
  private keySpentIn(line: string, month: string): number {
    let cached = this.keySpentCache.get(line);
    if (cached === undefined || cached.month !== month) {
      cached = { month, spent: this.keySpentById().get(line, month)?.spent ?? 0 };
      this.keySpentCache.set(line, cached);
    }
    return cached.spent;
  }

  private changeKeyHold(keyId: string | null, delta: number): void {
    if (keyId === null) return;
    const line = this.keyLineOf(keyId);
    const held = (this.keyHolds.get(line) ?? 0) + delta;
    if (held === 0) this.keyHolds.delete(line);
    else this.keyHolds.set(line, held);
  }

  /** Spendable buckets (unexpired, FEFO) with what requests in flight hold already taken out. */
  spendableBuckets(organizationId: string, now: number): Array<{ id: string; free: number }> {
    const spendable: Array<{ id: string; free: number }> = [];
    this.syncCaches();
    let buckets = this.bucketCache.get(organizationId);
    if (buckets === undefined) {
      buckets = this.bucketsWithCredits().all({ organizationId });
      this.bucketCache.set(organizationId, buckets);
    }
    for (const bucket of buckets) {
      if (bucket.expiresAt !== null && bucket.expiresAt <= now) continue;
      const free = bucket.remaining - (this.holds.get(bucket.id) ?? 0);
      if (free > 0) spendable.push({ id: bucket.id, free });
    }
    return spendable;
  }

  private changeHold(bucketId: string, delta: number): void {
    const held = (this.holds.get(bucketId) ?? 0) + delta;
    if (held === 0) this.holds.delete(bucketId);
    else this.holds.set(bucketId, held);
  }

  // Invariant: the credits held never exceed a bucket's remaining credits, and a key's spending in
  // the month plus what its requests hold never exceed its monthly limit. Both are checked and the
  // holds taken in one synchronous step, so no other request runs in between.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const buckets = this.spendableBuckets(input.organizationId, input.now);
    const available = buckets.reduce((sum, bucket) => sum + bucket.free, 0);
    if (available < input.amount) return { ok: false, available };
    const keyLine = input.keyId === null ? null : this.keyLineOf(input.keyId);
    const keyLimit = keyLine === null ? null : this.keyLimitOf(keyLine);
    if (keyLimit !== null && this.keySpentIn(keyLine!, utcMonth(input.now)) + (this.keyHolds.get(keyLine!) ?? 0) + input.amount > keyLimit) {
      return { ok: false, available, keyLimit };
    }
    const allocations = takeInOrder(buckets, input.amount);
    for (const allocation of allocations) this.changeHold(allocation.bucketId, allocation.amount);
    const reservationId = newId("res", input.now);
    this.heldReservations.set(reservationId, {
      organizationId: input.organizationId,
      amount: input.amount,
      allocations,
      keyId: input.keyId,
      requestId: input.requestId,
    });
    this.changeKeyHold(input.keyId, input.amount);
    return { ok: true, reservationId, available: available - input.amount };
  }

  private pendingCommits: Array<{ reservationId: string; usage: UsageRecord; done: (error: unknown) => void }> = [];

  /**
   * Group commit: the debits of every request that reaches commit in the same event-loop turn are
   * written in one transaction, and each request is answered only after that transaction commits.
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    if (!this.heldReservations.has(reservationId)) return Promise.resolve(false);
    return new Promise<boolean>((resolve, reject) => {
      if (this.pendingCommits.length === 0) setImmediate(() => void this.flushCommits());
      this.pendingCommits.push({
        reservationId,
        usage,
        done: (error) => (error === false ? resolve(false) : error === undefined ? resolve(true) : reject(error)),
      });
    });
  }

  private readonly ledgerBalanceOf = this.lazy(() =>
    this.db
      .select({ ledgerBalance: organizations.ledgerBalance, lowCreditThreshold: organizations.lowCreditThreshold })
      .from(organizations)
      .where(eq(organizations.id, sql.placeholder("organizationId")))
      .prepare(),
  );

  // Invariant: the buckets' debits, the usage rows, the running ledger sum, the usage counters and
  // the keys' monthly spending of a batch commit together (planned by planDebits, the one debit
  // planner), so each request is billed exactly once, balanceAfter follows the ledger order and a
  // key's spending is what its usage rows add up to. Every hold was allocated when reserved, so
  // every debit is granted.
  private debitBatch(items: Array<{ reservationId: string; usage: UsageRecord }>): void {
    const debits = items.map(({ reservationId, usage }): Debit => {
      const { organizationId, amount, allocations, keyId, requestId } = this.heldReservations.get(reservationId)!;
      return {
        reservationId,
        transactionId: newId("txn", usage.now),
        organizationId,
        amount,
        keyId,
        requestId,
        gtin: usage.gtin,
        description: usage.description,
        createdAt: usage.now,
        month: utcMonth(usage.now),
        items: usage.items ?? 1,
        allocated: { allocations, inBuckets: true },
      };
    });
    const locked: LockedState = { buckets: [], organizations: new Map(), keys: new Map() };
    for (const { organizationId, keyId } of debits) {
      if (!locked.organizations.has(organizationId)) locked.organizations.set(organizationId, this.ledgerBalanceOf().get({ organizationId })!);
      if (keyId !== null) locked.keys.set(keyId, { line: this.keyLineOf(keyId), capped: false });
    }
    writePlanSQLite(this.database, planDebits(debits, locked), { reason: BILLED_REASON, emit: (events) => this.webhooks.emit(events) });
    for (const { usage } of items) if (usage.idempotency !== undefined) this.idempotency.completeIdempotencyRecord(usage.idempotency);
  }

  private async flushCommits(): Promise<void> {
    // One reservation committed twice at once is debited once: the later calls answer false.
    const seen = new Set<string>();
    const batch = this.pendingCommits.filter((item) => !seen.has(item.reservationId) && seen.add(item.reservationId));
    const kept = new Set(batch);
    const repeated = this.pendingCommits.filter((item) => !kept.has(item));
    this.pendingCommits = [];
    for (const item of repeated) item.done(false);
    const debit = async (items: typeof batch) => {
      // The sweep of a crashed request's holds cannot happen here, but a release can: debit only what is still held.
      const held = items.filter((item) => this.heldReservations.has(item.reservationId));
      for (const item of items) if (!held.includes(item)) item.done(false);
      if (held.length === 0) return;
      // A request whose Idempotency-Key claim was taken over meanwhile is not billed (the claim fences the debit).
      const owned = await whileLocked(() => {
        const owning = this.writeKeepingCaches(() => {
          const owning = held.filter((item) => this.idempotency.ownsClaim(item.usage));
          this.debitBatch(owning);
          return owning;
        });
        // In the same synchronous step as the commit: no request may see the debit in the database
        // while its hold still counts (it would count twice against the balance or the key's limit).
        for (const item of owning) {
          this.debitCachedBuckets(item.reservationId);
          this.spendCachedKey(item.reservationId, item.usage.now);
          this.dropReservation(item.reservationId);
        }
        return owning;
      });
      for (const item of held) if (!owned.includes(item)) item.done(false);
      for (const item of owned) item.done(undefined);
    };
    try {
      await debit(batch);
    } catch (error) {
      // A lock that outlasted LOCK_WAIT_MS fails the whole batch; any other error is one bad debit,
      // which must not fail its neighbours: retry each alone and fail only the culprit.
      for (const item of batch.filter((candidate) => this.heldReservations.has(candidate.reservationId))) {
        try {
          if (isLocked(error)) throw error;
          await debit([item]);
        } catch (itemError) {
          // Not debited: the caller gives the held credits back (lookUpPrice releases on any failed commit).
          item.done(itemError);
        }
      }
    }
  }

  /** After a committed debit, the cached buckets take the same debit (so the cache stays exact). */
  private debitCachedBuckets(reservationId: string): void {
    const reservation = this.heldReservations.get(reservationId)!;
    const buckets = this.bucketCache.get(reservation.organizationId);
    if (buckets === undefined) return;
    for (const allocation of reservation.allocations) {
      const bucket = buckets.find((b) => b.id === allocation.bucketId);
      if (bucket === undefined) this.bucketCache.delete(reservation.organizationId);
      else bucket.remaining -= allocation.amount;
    }
  }

  /** After a committed debit, the key's cached monthly spending takes it too. */
  private spendCachedKey(reservationId: string, now: number): void {
    const reservation = this.heldReservations.get(reservationId)!;
    if (reservation.keyId === null) return;
    const line = this.keyLineOf(reservation.keyId);
    const cached = this.keySpentCache.get(line);
    if (cached === undefined) return;
    if (cached.month === utcMonth(now)) cached.spent += reservation.amount;
    else this.keySpentCache.delete(line);
  }

  private dropReservation(reservationId: string): boolean {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    this.heldReservations.delete(reservationId);
    for (const allocation of reservation.allocations) this.changeHold(allocation.bucketId, -allocation.amount);
    this.changeKeyHold(reservation.keyId, -reservation.amount);
    return true;
  }

  async releaseReservation(reservationId: string, now: number): Promise<boolean> {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    // Paid before the holds drop, in the same synchronous step, so no request can spend what a refund is owed.
    if (reservation.allocations.some((allocation) => this.clawbackOwedOf().get(allocation.bucketId)!.owed > 0)) {
      this.write(() => this.payClawbacks(reservation.organizationId, reservation.allocations, now));
    }
    return this.dropReservation(reservationId);
  }

  async shrinkReservation(reservationId: string, keep: number, now: number): Promise<boolean> {
    const reservation = this.heldReservations.get(reservationId);
    if (reservation === undefined) return false;
    if (!(keep > 0 && keep < reservation.amount)) throw new RangeError(`cannot keep ${keep} of a reservation of ${reservation.amount}`);
    const { kept, given } = splitAllocations(reservation.allocations, keep);
    // As in releaseReservation: refunds are paid before the holds drop, in the same synchronous step.
    if (given.some((allocation) => this.clawbackOwedOf().get(allocation.bucketId)!.owed > 0)) {
      this.write(() => this.payClawbacks(reservation.organizationId, given, now));
    }
    for (const allocation of given) this.changeHold(allocation.bucketId, -allocation.amount);
    this.changeKeyHold(reservation.keyId, keep - reservation.amount);
    reservation.allocations = kept;
    reservation.amount = keep;
    return true;
  }

  // Read at every release of a hold (each stale-data answer): bun:sqlite's own statement, without
  // drizzle's per-call mapping, which cost that answer about 15 % of its CPU.
  private readonly clawbackOwedOf = this.lazy(() =>
    this.database.prepare<{ owed: number }, [string]>("SELECT clawback_owed AS owed FROM credit_buckets WHERE id = ?1"),
  );

  private readonly payClawback = this.lazy(() =>
    this.db
      .update(creditBuckets)
      .set({
        remaining: sql`${creditBuckets.remaining} - ${sql.placeholder("paid")}`,
        clawbackOwed: sql`${creditBuckets.clawbackOwed} - ${sql.placeholder("paid")}`,
      })
      .where(eq(creditBuckets.id, sql.placeholder("bucketId")))
      .prepare(),
  );

  // Invariant: a refund's claim on held credits is paid from exactly what comes back to the bucket,
  // with one `refund` row in the same transaction; credits a request committed are usage, not owed.
  private payClawbacks(organizationId: string, givenBack: Array<{ bucketId: string; amount: number }>, now: number): void {
    const paid: Array<{ bucketId: string; amount: number }> = [];
    for (const { bucketId, amount } of givenBack) {
      const pay = Math.min(this.clawbackOwedOf().get(bucketId)!.owed, amount);
      if (pay === 0) continue;
      this.payClawback().run({ bucketId, paid: pay });
      paid.push({ bucketId, amount: pay });
    }
    const total = paid.reduce((sum, item) => sum + item.amount, 0);
    if (total === 0) return;
    const bucketId = paid.length === 1 ? paid[0]!.bucketId : null;
    this.appendLedger({
      organizationId,
      type: "refund",
      amount: -total,
      bucketId,
      description: "Refund: credits a request in flight gave back",
      createdAt: now,
    });
  }

  async recoverInFlightWork(now: number): Promise<void> {
    this.write((tx) => {
      tx.delete(idempotencyRecords).where(eq(idempotencyRecords.status, "in-progress")).run();
      // The holds of the previous process died with it: what a refund was owed from them is back in its bucket.
      const owing = tx
        .select({ id: creditBuckets.id, organizationId: creditBuckets.organizationId, remaining: creditBuckets.remaining })
        .from(creditBuckets)
        .where(gt(creditBuckets.clawbackOwed, 0))
        .all();
      for (const bucket of owing) this.payClawbacks(bucket.organizationId, [{ bucketId: bucket.id, amount: bucket.remaining }], now);
      tx.update(creditBuckets).set({ clawbackOwed: 0 }).where(gt(creditBuckets.clawbackOwed, 0)).run();
    });
  }

  /** Holds are in memory and die with the process, so nothing is ever left to sweep. */
  async releaseStaleReservations(_now: number): Promise<number> {
    return 0;
  }

  async availableCredits(organizationId: string, now: number): Promise<number> {
    return this.spendableBuckets(organizationId, now).reduce((sum, bucket) => sum + bucket.free, 0);
  }

  // A pure read: expired credits are written off by the expiry job (expireBuckets), never by a
  // reader, so the operator CLI can read beside a serving process without touching its credits.
  async getBalance(organizationId: string, now: number): Promise<Balance> {
    // Spent, expired, written-off and clawed-back buckets are history: the ledger tells it, the balance does not list them.
    const buckets = this.db
      .select(bucketColumns)
      .from(creditBuckets)
      .where(
        and(
          eq(creditBuckets.organizationId, organizationId),
          gt(creditBuckets.remaining, 0),
          or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, now)),
        ),
      )
      .orderBy(...FEFO)
      .all()
      .map((bucket) => ({ ...bucket, remaining: bucket.remaining - (this.holds.get(bucket.id) ?? 0) }));
    let reserved = 0;
    for (const reservation of this.heldReservations.values()) if (reservation.organizationId === organizationId) reserved += reservation.amount;
    const available = buckets.reduce((sum, b) => sum + b.remaining, 0);
    return { available, reserved, buckets };
  }

  async monthlySpending(keyIds: string[], month: string): Promise<Map<string, number>> {
    return new Map(keyIds.map((id) => [id, this.keySpentById().get(this.keyLineOf(id), month)?.spent ?? 0]));
  }
}
