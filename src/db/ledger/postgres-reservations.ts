import { and, eq, gt, isNull, or, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import type postgres from "postgres";
import { utcMonth } from "../../lib/clock";
import { newId } from "../../lib/ids";
import type { ChangeListener } from "../change-listener";
import { isConnectionLost } from "../database-errors";
import { CAPPED_KEY, SPENDABLE_BUCKETS } from "../keys/postgres";
import { isOverdrawRefused, retrying } from "../postgres-retry";
import * as schema from "../schema/postgres";
import { BILLED_REASON, CreditsSpentMeanwhile, DebitInDoubt, splitAllocations, STALE_RESERVATION_MS } from "../store";
import type { Balance, BalanceAtKeyRead, Reservation, Store, UsageRecord } from "../store";
import { fefoOrder } from "./allocation";
import { balanceEvents, type DebitOutcome, debitBatch, fefo, type HeldCredits, type PendingDebit } from "./postgres-debits";
import { settleIn } from "./postgres-lease-settlement";
import { CreditLeases, type LeasedDebit } from "./postgres-leases";

const { creditBuckets, leaseUsage, reservations } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

const bucketColumns = {
  id: creditBuckets.id,
  organizationId: creditBuckets.organizationId,
  source: creditBuckets.source,
  granted: creditBuckets.granted,
  remaining: creditBuckets.remaining,
  expiresAt: creditBuckets.expiresAt,
  createdAt: creditBuckets.createdAt,
};

// Soonest-expiring first; buckets that never expire last; then oldest first (reserveCredits
// spells the same order in SQL, and locks buckets in it).
const FEFO = [sql.raw(fefoOrder("credit_buckets"))] as const;

/** How long a remembered balance admits requests without being read again (see spendableSeen). */
const BALANCE_MEMORY_MS = 1_000;

/** How long a request the buckets cannot cover waits for other instances to give their leases back. */
const LEASE_RECALL_WAIT_MS = 100;

/** Debits per group-commit statement at most; more wait for the next one. */
const COMMIT_BATCH_LIMIT = 500;

/**
 * While look-ups arrive together (the last batch held at least COMMIT_GATHER_SIBLINGS), a batch
 * waits up to COMMIT_GATHER_MS for as many look-ups as the largest of the last COMMIT_GATHER_MEMORY
 * batches held (at most COMMIT_GATHER_TARGET), as PostgreSQL's commit_delay waits for
 * commit_siblings: a statement's fixed cost is most of a small batch's, and a second instance halves
 * each one's batches. It goes as soon as they are queued: the clients whose answers the last batches
 * carried are back. A look-up that arrives alone is written at once.
 */
const COMMIT_GATHER_MS = 1;
const COMMIT_GATHER_SIBLINGS = 2;
const COMMIT_GATHER_TARGET = 32;
const COMMIT_GATHER_MEMORY = 16;

/**
 * What the PostgreSQL store lends its reservations: its retrying transaction, the database's clock,
 * and, read at each use, the group commit's own connection and how long a debit whose connection
 * was lost is retried (both properties of the store, which tests may replace).
 */
export interface PostgresReservationsDeps {
  transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T>;
  databaseNow(): postgres.PendingQuery<postgres.Row[]>;
  debitConnection(): postgres.Sql;
  lostConnectionPatienceMs(): number;
  /** Says whether a balance read may be remembered, and signs this instance's debit notices. */
  changes: ChangeListener;
}

/**
 * Credits held by requests in flight on PostgreSQL: in this instance's memory for uncapped keys, in
 * reservation rows for capped ones; the group commit that debits them; releases, shrinks and sweeps
 * that give them back with the refunds they owe; and balances.
 */
export class PostgresReservations {
  constructor(
    private readonly client: postgres.Sql,
    private readonly db: DB,
    private readonly deps: PostgresReservationsDeps,
  ) {
    this.leases = new CreditLeases({
      client,
      instanceId: deps.changes.instanceId,
      giveBack: (leaseId, now) => this.giveBackLease(leaseId, now),
      changed: (organizationId) => {
        this.spendableSeen.delete(organizationId);
        this.deps.changes.noteCreditsChange();
      },
      reason: BILLED_REASON,
    });
  }

  /** The credit leases this instance spends from (see CreditLeases). */
  readonly leases: CreditLeases;

  private transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return this.deps.transaction(work, config);
  }

  private databaseNow() {
    return this.deps.databaseNow();
  }

  private get lostConnectionPatienceMs(): number {
    return this.deps.lostConnectionPatienceMs();
  }

  /** Builds a statement on first use, so it is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  /** Waits for the debits queued for the group commit to be written. */
  async drain(): Promise<void> {
    await this.flushing;
  }

  /** Writes the queued debits, then gives every lease back (at shutdown, once no request holds credits). */
  async close(now: number): Promise<void> {
    await this.drain();
    await this.leases.giveAllBack(now);
  }

  /** One batch of the group commit, on the store's debit connection (see debitBatch). */
  private debitBatch(items: PendingDebit[], options: { retried: boolean }): Promise<Map<string, DebitOutcome>> {
    this.batchEpoch = this.deps.changes.creditsEpoch;
    return debitBatch(this.deps.debitConnection(), items, { ...options, instanceId: this.deps.changes.instanceId });
  }

  // A billed request of a key without a monthly credit limit (nearly all) writes once: its debit.
  // reserveCredits only reads the balance (and whether the key is capped after all; both come with
  // the request's key, read by findKeyCredential in the same statement) and holds the credits in this
  // instance's memory, so its other requests cannot take them too; the debit takes
  // them from the buckets, soonest-expiring first, in the group commit's statement, under the
  // buckets' row locks, and takes nothing when they are gone (another instance spent them in
  // between): the look-up is then a 402. A crash loses only memory: nothing was written before the
  // debit, and the debit (usage row, bucket updates, ledger sum, Idempotency-Key answer) is one
  // statement that commits synchronously before the request is answered; group commit shares its
  // WAL flush among the requests that commit together.
  //
  // A capped key's request holds its credits in a reservation row instead (reserveCapped), so the
  // monthly limit counts requests in flight on every instance. Such rows survive the instance that
  // wrote them: any instance commits, releases or sweeps them. Reserve and release commit without
  // waiting (synchronous_commit off): a lost reserve was never answered (and the WAL is sequential,
  // so any later synchronous commit flushes it too), and a lost release leaves a reservation row
  // that the stale sweep gives back.
  async reserveCredits(input: Parameters<Store["reserveCredits"]>[0]): Promise<Reservation> {
    const reservationId = newId("res", input.now);
    // A lease taken or given back meanwhile moved credits in or out of the buckets: they are read after it.
    const changing = this.leases.changeOf(input.organizationId);
    if (changing !== undefined) await changing;
    let balance = (changing === undefined ? input.balance : undefined) ?? (await this.readBalance(input));
    if (!balance.capped) {
      const leased = this.holdLeased(input, reservationId, balance);
      if (leased !== null) return leased;
    }
    // Too few remembered credits are read again: another instance may have granted or given back some.
    if (balance.remembered && !balance.capped && this.availableOf(input.organizationId, balance) < input.amount) balance = await this.readBalance(input);
    if (balance.capped) {
      this.spendableSeen.delete(input.organizationId);
      const reserved = await this.reserveCapped(input, reservationId);
      // The buckets may be short by what this instance's lease holds: it goes back, and the reservation is tried again.
      if (!reserved.ok && reserved.keyLimit === undefined && (await this.leases.recall(input.organizationId))) return this.reserveCapped(input, reservationId);
      return reserved;
    }
    if (this.availableOf(input.organizationId, balance) < input.amount) balance = await this.afterLeasesBack(input, balance);
    const available = this.availableOf(input.organizationId, balance);
    if (available < input.amount) return { ok: false, available: available + this.leases.spare(input.organizationId, input.now) };
    this.held.set(reservationId, {
      organizationId: input.organizationId,
      amount: input.amount,
      keyId: input.keyId,
      requestId: input.requestId,
      committing: false,
    });
    this.holdHere(input.organizationId, input.amount);
    this.leases.want(input.organizationId, available - input.amount, input.now);
    return { ok: true, reservationId, available: available - input.amount + this.leases.spare(input.organizationId, input.now) };
  }

  /**
   * Before a refusal: the buckets and this instance's lease may cover together what neither covers
   * alone, or other instances' leases may; those go back, and the balance is read after them.
   */
  private async afterLeasesBack(input: Parameters<Store["reserveCredits"]>[0], balance: BalanceAtKeyRead): Promise<BalanceAtKeyRead> {
    const { organizationId, amount, now } = input;
    const available = this.availableOf(organizationId, balance);
    const given =
      available + this.leases.spare(organizationId, now) >= amount
        ? await this.leases.recall(organizationId)
        : await this.othersGaveLeasesBack(organizationId, amount - available);
    return given ? this.readBalance(input) : balance;
  }

  /**
   * When other instances' leases of the organization hold at least `short` credits: asks them
   * back and waits (up to LEASE_RECALL_WAIT_MS) for the buckets to change; true when they did.
   */
  private async othersGaveLeasesBack(organizationId: string, short: number): Promise<boolean> {
    if (!this.deps.changes.live) return false;
    const [leased] = await this.client<[{ credits: string }]>`
      SELECT coalesce(sum(amount), 0) AS credits FROM reservations
      WHERE organization_id = ${organizationId} AND instance_id IS NOT NULL AND instance_id <> ${this.deps.changes.instanceId}`;
    if (Number(leased.credits) < short) return false;
    const epoch = this.deps.changes.creditsEpoch;
    await this.deps.changes.wantLeasesBack(this.client, organizationId);
    for (const until = performance.now() + LEASE_RECALL_WAIT_MS; performance.now() < until; await Bun.sleep(5))
      if (this.deps.changes.creditsEpoch !== epoch) return true;
    return false;
  }

  /** Holds a request's credits against the organization's lease when it has a usable one that covers them (see CreditLeases). */
  private holdLeased(input: Parameters<Store["reserveCredits"]>[0], reservationId: string, balance: BalanceAtKeyRead): Reservation | null {
    const lease = this.leases.hold(input.organizationId, input.amount, input.now);
    if (lease === null) return null;
    const { organizationId, amount, keyId, requestId } = input;
    this.held.set(reservationId, { organizationId, amount, keyId, requestId, committing: false, lease });
    const inBuckets = this.availableOf(organizationId, balance);
    this.leases.want(organizationId, inBuckets, input.now);
    return { ok: true, reservationId, available: inBuckets + this.leases.spare(organizationId, input.now) };
  }

  private availableOf(organizationId: string, balance: BalanceAtKeyRead): number {
    return Math.max(0, balance.spendable - (this.heldHere.get(organizationId) ?? 0));
  }

  private async readBalance(input: { organizationId: string; keyId: string | null; now: number }): Promise<BalanceAtKeyRead> {
    const epoch = this.deps.changes.creditsEpoch;
    const balance = (await this.balanceCheck().execute({ organizationId: input.organizationId, keyId: input.keyId, now: input.now }))[0]!;
    this.rememberRead(input.organizationId, balance.spendable, epoch);
    return balance;
  }

  // The balance admission reads between reads, per organization, while the ChangeListener hears
  // every change, for at most BALANCE_MEMORY_MS: its spendable credits as last read (with a key or
  // by a balance read), as left by this instance's last debit (read under the buckets' locks), or as
  // another instance's debit announced it (see rememberRead for reads and debits that overlap a
  // notice); forgotten when anything but a debit changes the buckets (a grant, a refund, an expiry:
  // the buckets' trigger says so). It only admits: the debit, which takes the credits under the
  // buckets' locks, refuses what is no longer there (CreditsSpentMeanwhile, a 402). Too few is read
  // again before a request is refused.
  private readonly spendableSeen = new Map<string, { spendable: number; at: number }>();

  /** The credits epoch when the batch in flight was sent. */
  private batchEpoch = -1;

  /**
   * Remembers what a read or a debit begun at credits epoch `epoch` found. When a change was heard
   * meanwhile their order is unknown: an announced debit's balance is kept if it is the lower, and
   * nothing is kept after any other change (the next request reads).
   */
  rememberRead(organizationId: string, spendable: number, epoch: number): void {
    if (!this.deps.changes.live) return;
    const at = performance.now();
    if (this.deps.changes.canRememberCredits(epoch)) return void this.spendableSeen.set(organizationId, { spendable, at });
    const heard = this.spendableSeen.get(organizationId);
    if (heard !== undefined) this.spendableSeen.set(organizationId, { spendable: Math.min(spendable, heard.spendable), at });
  }

  /** Another instance's debit left `spendable` (null: something else changed the buckets). */
  creditsChanged(organizationId: string, spendable: number | null): void {
    if (spendable === null) return void this.spendableSeen.delete(organizationId);
    this.spendableSeen.set(organizationId, { spendable, at: performance.now() });
    this.leases.bucketsLeft(organizationId, spendable);
  }

  forgetSpendable(): void {
    this.spendableSeen.clear();
  }

  rememberedSpendable(organizationId: string): number | undefined {
    const seen = this.spendableSeen.get(organizationId);
    if (seen === undefined) return undefined;
    if (this.deps.changes.live && performance.now() - seen.at < BALANCE_MEMORY_MS) return seen.spendable;
    this.spendableSeen.delete(organizationId);
    return undefined;
  }

  /** Credits held in memory by this instance's requests in flight: by reservation id, and their sum by organization. */
  private readonly held = new Map<string, HeldCredits>();

  private readonly heldHere = new Map<string, number>();

  private holdHere(organizationId: string, amount: number): void {
    const total = (this.heldHere.get(organizationId) ?? 0) + amount;
    if (total === 0) this.heldHere.delete(organizationId);
    else this.heldHere.set(organizationId, total);
  }

  /** The spendable balance, and whether the key's requests take the capped path (CAPPED_KEY). */
  private readonly balanceCheck = this.lazy(() =>
    this.db
      .select({
        spendable: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)`.mapWith(Number),
        capped: sql<boolean>`EXISTS (SELECT 1 FROM api_keys WHERE id = ${sql.placeholder("keyId")} AND ${CAPPED_KEY})`,
      })
      .from(creditBuckets)
      .where(SPENDABLE_BUCKETS)
      .prepare("balance_check"),
  );

  // Invariant: a key line's spending in the month plus what its open reservations hold never exceeds
  // its monthly limit (a line is a key and its rotations, and its limit is the live key's). Every
  // reservation of a capped line first locks the line's counter row of the month (inserting it if
  // needed; a key's line never changes, so a rotation cannot split the queue), and every debit moves
  // that row in its own statement, so reservations of one line queue on it and each one reads the
  // committed spending and reservations of the others (read in a second statement, after the lock:
  // a debit that committed before is seen whole, one still running waits and is seen as neither).
  // A released reservation frees its share at once. Look-ups of the line debited from a credit lease
  // before it was capped count, packed in lease_usage, until settled (the lease debit refuses a
  // capped key, so no more are written once the limit is set).
  private async reserveCapped(input: Parameters<Store["reserveCredits"]>[0], reservationId: string): Promise<Reservation> {
    const keyId = input.keyId!;
    const outcome = await retrying(
      () =>
        this.client.begin(async (tx) => {
          const [counter] = await tx<Array<{ line: string; spent: string }>>`
          INSERT INTO api_key_monthly_usage (key_id, month, spent)
          SELECT coalesce(line_id, id), ${utcMonth(input.now)}, 0 FROM api_keys WHERE id = ${keyId}
          ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent
          RETURNING key_id AS line, spent`;
          const line = counter!.line;
          const [key] = await tx<Array<{ monthly_credit_limit: string | null; held: string }>>`
          SELECT (SELECT monthly_credit_limit FROM api_keys WHERE id = ${line} OR line_id = ${line} ORDER BY status = 'ACTIVE' DESC, created_at DESC LIMIT 1) AS monthly_credit_limit,
                 (SELECT coalesce(sum(amount), 0)::bigint FROM reservations WHERE key_id IN (SELECT id FROM api_keys WHERE id = ${line} OR line_id = ${line}))
                 + (SELECT coalesce(sum((u->>'amount')::bigint), 0)::bigint FROM lease_usage, json_array_elements(look_ups) u
                      WHERE organization_id = ${input.organizationId} AND u->>'keyId' IN (SELECT id FROM api_keys WHERE id = ${line} OR line_id = ${line})) AS held`;
          const limit = key?.monthly_credit_limit == null ? null : Number(key.monthly_credit_limit);
          if (limit !== null && Number(counter!.spent) + Number(key!.held) + input.amount > limit) return { refusedBy: limit };
          const [row] = await this.reserveStatement(tx, input, reservationId);
          return { row: row! };
        }),
      isOverdrawRefused,
    );
    if ("refusedBy" in outcome) return { ok: false, available: await this.availableCredits(input.organizationId, input.now), keyLimit: outcome.refusedBy };
    // What the buckets hold, and what this instance's lease holds free.
    const available = Number(outcome.row.available) + this.leases.spare(input.organizationId, input.now);
    if (outcome.row.reservation_id === null) return { ok: false, available };
    this.bucketsMoved(input.organizationId);
    return { ok: true, reservationId, available: available - input.amount };
  }

  private reserveStatement(tx: postgres.TransactionSql, input: Parameters<Store["reserveCredits"]>[0], reservationId: string) {
    return tx<Array<{ available: string; reservation_id: string | null }>>`
        WITH locked AS (
          SELECT id, remaining, expires_at FROM credit_buckets
          WHERE organization_id = ${input.organizationId} AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${input.now})
          ORDER BY ${fefo(tx)}
          FOR UPDATE
        ),
        total AS (SELECT coalesce(sum(remaining), 0)::bigint AS available FROM locked),
        fefo AS (
          SELECT id, remaining, row_number() OVER w AS position, (sum(remaining) OVER w - remaining)::bigint AS before
          FROM locked WINDOW w AS (ORDER BY ${fefo(tx)})
        ),
        taken AS (
          SELECT id, position, least(remaining, ${input.amount}::bigint - before) AS amount
          FROM fefo, total WHERE total.available >= ${input.amount} AND before < ${input.amount}
        ),
        debited AS (
          UPDATE credit_buckets SET remaining = credit_buckets.remaining - taken.amount FROM taken WHERE credit_buckets.id = taken.id
        ),
        reserved AS (
          INSERT INTO reservations (id, organization_id, amount, allocations, key_id, request_id, created_at)
          SELECT ${reservationId}, ${input.organizationId}, ${input.amount},
                 jsonb_agg(jsonb_build_object('bucketId', id, 'amount', amount) ORDER BY position),
                 ${input.keyId}, ${input.requestId}, ${tx`(extract(epoch from now()) * 1000)::bigint`}
          FROM taken HAVING count(*) > 0
          RETURNING id
        )
        SELECT total.available, (SELECT id FROM reserved) AS reservation_id, set_config('synchronous_commit', 'off', true) AS async_commit
        FROM total`;
  }

  private pendingCommits: PendingDebit[] = [];

  /** The commit loop while it runs: at most one batch of this instance is in flight at a time. */
  private flushing: Promise<void> | null = null;

  /** Debits the last batches held, the latest last (see COMMIT_GATHER_MS). */
  private readonly batchSizes: number[] = [];

  /** While the commit loop gathers: how many queued commits end the wait, and what ends it. */
  private gathering: { target: number; end: () => void } | null = null;

  /**
   * Group commit: a commit that arrives while none is in flight is written at once; the commits that
   * arrive while one is in flight wait for it (and up to COMMIT_GATHER_MS more while look-ups arrive
   * together) and then go together, as one transaction. Each caller
   * is answered only after the transaction that holds its debit has committed (and its WAL is flushed).
   */
  commitReservation(reservationId: string, usage: UsageRecord): Promise<boolean> {
    const held = this.held.get(reservationId) ?? null;
    // A hold being debited is not released meanwhile; it is held again if its debit is not written.
    if (held !== null) {
      if (held.committing) return Promise.resolve(false);
      held.committing = true;
    }
    return new Promise<boolean>((resolve, reject) => {
      this.pendingCommits.push({ reservationId, usage, held, transactionId: newId("txn", usage.now), resolve, reject });
      this.flushing ??= this.flushCommits();
      if (this.gathering !== null && this.pendingCommits.length >= this.gathering.target) this.gathering.end();
    });
  }

  private async flushCommits(): Promise<void> {
    while (this.pendingCommits.length > 0) {
      const target = this.gatherTarget();
      if (target !== null) await this.gathered(target);
      const queued = this.pendingCommits.splice(0, COMMIT_BATCH_LIMIT);
      this.batchSizes.push(queued.length);
      if (this.batchSizes.length > COMMIT_GATHER_MEMORY) this.batchSizes.shift();
      // One reservation committed twice at once is debited once: the later calls answer false.
      const firsts = new Map(queued.map((item) => [item.reservationId, item] as const).reverse());
      const batch = queued.filter((item) => firsts.get(item.reservationId) === item);
      for (const item of queued) if (firsts.get(item.reservationId) !== item) item.resolve(false);
      const unleased = await this.debitLeased(batch);
      if (unleased.length === 0) continue;
      try {
        const outcomes = await retrying(() => this.debitBatch(unleased, { retried: false }), isOverdrawRefused);
        for (const item of unleased) this.settleDebit(item, outcomes.get(item.reservationId));
      } catch {
        await this.debitEachAlone(unleased);
      }
    }
    // Cleared in the same turn as the loop's last look at the queue (every failure is caught above),
    // so a commit queued by a caller answered just now starts a new loop rather than being left behind.
    this.flushing = null;
  }

  /** While look-ups arrive together: how many queued commits the next batch waits for, if it waits (see COMMIT_GATHER_MS). */
  private gatherTarget(): number | null {
    const target = Math.min(COMMIT_GATHER_TARGET, Math.max(0, ...this.batchSizes));
    return (this.batchSizes.at(-1) ?? 0) < COMMIT_GATHER_SIBLINGS || this.pendingCommits.length >= target ? null : target;
  }

  /** Until `target` commits are queued, or COMMIT_GATHER_MS has passed. */
  private gathered(target: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(() => this.gathering?.end(), COMMIT_GATHER_MS);
      this.gathering = {
        target,
        end: () => {
          clearTimeout(timer);
          this.gathering = null;
          resolve();
        },
      };
    });
  }

  /**
   * Debits the batch's look-ups held against leases, in one statement (CreditLeases.debit), and
   * returns the rest. Those of a lease whose debit failed are debited alone from the buckets (a
   * retry finds it in its lease_usage row, or its ledger row once settled, when the failed statement
   * committed after all); the lease is lost.
   * Idempotent requests take the buckets' debit, which fences them with their claim.
   */
  private async debitLeased(batch: PendingDebit[]): Promise<PendingDebit[]> {
    const leased = batch.filter((item) => item.held?.lease?.lost === false && item.usage.idempotency === undefined);
    if (leased.length === 0) return batch;
    try {
      await retrying(() => this.leases.debit(this.deps.debitConnection(), leased.map(leasedDebitOf)));
      for (const item of leased) this.settleDebit(item, { outcome: "committed" });
    } catch {
      await Promise.all([...new Set(leased.map((item) => item.held!.lease!))].map((lease) => this.leases.lose(lease)));
      await this.debitEachAlone(leased);
    }
    return batch.filter((item) => !leased.includes(item));
  }

  /**
   * One bad debit must not fail its neighbours: each is retried alone and only the culprit fails. A
   * debit whose statement did commit although its caller saw an error is found by its ledger row's
   * id, so it is never written twice.
   */
  private async debitEachAlone(items: PendingDebit[]): Promise<void> {
    const patientUntil = performance.now() + this.lostConnectionPatienceMs;
    for (const item of items) {
      try {
        this.settleDebit(item, (await this.debitAlone(item, patientUntil)).get(item.reservationId));
      } catch (error) {
        if (item.held !== null) {
          item.held.committing = false;
          // The balance it would have left is unknown: the next answer reads it.
          this.spendableSeen.delete(item.held.organizationId);
        }
        // Every attempt lost its connection: the last one that reached PostgreSQL may have committed.
        item.reject(isConnectionLost(error) ? new DebitInDoubt(error) : error);
      }
    }
  }

  /**
   * A debit retried alone finds itself written when an earlier attempt committed, so it is also
   * retried after a lost connection (whose last attempt may have committed unseen), until
   * `patientUntil` (one deadline for the whole batch, on the monotonic clock): a look-up that was
   * debited must not be answered as failed. The pauses let postgres.js connect again.
   */
  private async debitAlone(item: PendingDebit, patientUntil: number): Promise<Map<string, DebitOutcome>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await retrying(() => this.debitBatch([item], { retried: true }), isOverdrawRefused);
      } catch (error) {
        if (!isConnectionLost(error) || performance.now() >= patientUntil) throw error;
        await Bun.sleep(Math.min(25 * 2 ** attempt, 500));
      }
    }
  }

  /** Answers a commit; a hold in memory is let go once its debit is written or refused, and is held again otherwise. */
  private settleDebit(item: PendingDebit, outcome: DebitOutcome | undefined): void {
    if (item.held !== null) {
      item.held.committing = false;
      if (outcome !== undefined) this.release(item.reservationId, item.held);
      // A lease's debit leaves the buckets as they were.
      if (item.held.lease === undefined || outcome?.outcome !== "committed" || outcome.spendable !== undefined)
        this.debitedHere(item.held.organizationId, outcome);
    }
    if (outcome?.outcome === "spent") item.reject(new CreditsSpentMeanwhile(outcome.available));
    else item.resolve(outcome?.outcome === "committed");
  }

  /** A debit of held credits read the organization's buckets under lock: that is the balance to remember; forgotten when it is not known. */
  private debitedHere(organizationId: string, outcome: DebitOutcome | undefined): void {
    if (outcome?.outcome === "committed" && outcome.spendable !== undefined) this.rememberRead(organizationId, outcome.spendable, this.batchEpoch);
    else this.spendableSeen.delete(organizationId);
  }

  /**
   * A reservation row of this instance took credits from the organization's buckets or gave them back:
   * its remembered balance is forgotten, and a read that overlapped the change is not remembered
   * (the buckets' notice of it comes later, and a read that came first may hold the old balance).
   */
  private bucketsMoved(organizationId: string): void {
    this.spendableSeen.delete(organizationId);
    this.deps.changes.noteCreditsChange();
  }

  private release(reservationId: string, held: HeldCredits): void {
    this.held.delete(reservationId);
    if (held.lease === undefined) this.holdHere(held.organizationId, -held.amount);
    else this.leases.unhold(held.lease, held.amount);
  }

  async releaseReservation(reservationId: string, now: number): Promise<boolean> {
    const held = this.held.get(reservationId);
    if (held !== undefined) {
      if (held.committing) return false;
      this.release(reservationId, held);
      return true;
    }
    const [row] = await retrying(() =>
      this.restoreCredits(this.client, this.client`DELETE FROM reservations WHERE id = ${reservationId} RETURNING organization_id, allocations`, now),
    );
    if (row!.organization_id !== null) this.bucketsMoved(row!.organization_id);
    return row!.released === 1;
  }

  // The reservation row is locked, so a commit or a sweep racing with it waits and then finds what
  // is left (a commit debits `keep`); one that came first leaves no row, and nothing is given back.
  async shrinkReservation(reservationId: string, keep: number, now: number): Promise<boolean> {
    const held = this.held.get(reservationId);
    if (held !== undefined) {
      if (held.committing) return false;
      if (!(keep > 0 && keep < held.amount)) throw new RangeError(`cannot keep ${keep} of a reservation of ${held.amount}`);
      if (held.lease === undefined) this.holdHere(held.organizationId, keep - held.amount);
      else this.leases.unhold(held.lease, held.amount - keep);
      held.amount = keep;
      return true;
    }
    const shrunk = await retrying(() =>
      this.client.begin(async (tx) => {
        const [row] = await tx<Array<{ organization_id: string; amount: string; allocations: string }>>`
          SELECT organization_id, amount, allocations::text AS allocations FROM reservations WHERE id = ${reservationId} FOR UPDATE`;
        if (row === undefined) return null;
        if (!(keep > 0 && keep < Number(row.amount))) throw new RangeError(`cannot keep ${keep} of a reservation of ${row.amount}`);
        const { kept, given } = splitAllocations(JSON.parse(row.allocations), keep);
        await tx`UPDATE reservations SET amount = ${keep}, allocations = ${JSON.stringify(kept)}::text::jsonb WHERE id = ${reservationId}`;
        await this.restoreCredits(tx, tx`SELECT ${row.organization_id}::text AS organization_id, ${JSON.stringify(given)}::text::jsonb AS allocations`, now);
        return row.organization_id;
      }),
    );
    if (shrunk !== null) this.bucketsMoved(shrunk);
    return shrunk !== null;
  }

  /**
   * Gives the allocations of `claimed` (one row: organization_id, allocations) back to their buckets.
   * Invariant: what a refund is owed from the buckets (clawback_owed) is paid from exactly the
   * credits given back, in the same statement, with one `refund` row, so no request can spend them
   * in between. `owing` locks the buckets in FEFO order (as reserveCredits does) and reads their
   * latest committed clawback, so a refund that committed meanwhile is paid too.
   */
  private restoreCredits(sql: postgres.Sql | postgres.TransactionSql, claimed: postgres.PendingQuery<postgres.Row[]>, now: number) {
    const transactionId = newId("txn", now);
    return sql<Array<{ released: number; organization_id: string | null }>>`
        WITH claimed AS (${claimed}),
        given AS (
          SELECT allocation->>'bucketId' AS bucket_id, (allocation->>'amount')::bigint AS amount
          FROM claimed, jsonb_array_elements(claimed.allocations) AS allocation
        ),
        owing AS (
          SELECT credit_buckets.id, least(credit_buckets.clawback_owed, given.amount) AS paid
          FROM credit_buckets JOIN given ON given.bucket_id = credit_buckets.id
          ORDER BY ${fefo(sql, "credit_buckets")}
          FOR UPDATE OF credit_buckets
        ),
        restored AS (
          UPDATE credit_buckets SET remaining = credit_buckets.remaining + given.amount - owing.paid, clawback_owed = credit_buckets.clawback_owed - owing.paid
          FROM given JOIN owing ON owing.id = given.bucket_id WHERE credit_buckets.id = given.bucket_id
        ),
        paid AS (
          SELECT sum(paid)::bigint AS amount, CASE WHEN count(*) = 1 THEN min(id) END AS bucket_id FROM owing WHERE paid > 0 HAVING count(*) > 0
        ),
        moved AS (
          UPDATE organizations SET ledger_balance = organizations.ledger_balance - paid.amount
          FROM claimed, paid WHERE organizations.id = claimed.organization_id
          RETURNING organizations.id, organizations.ledger_balance, organizations.low_credit_threshold
        ),
        ledger AS (
          INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, description, created_at)
          SELECT ${transactionId}, moved.id, 'refund', -paid.amount, moved.ledger_balance, paid.bucket_id, 'Refund: credits a request in flight gave back', ${now}
          FROM moved, paid
        ),
        -- The refund lowers the sum like any debit (appendLedger): its balance events, with their deliveries, in the same statement.
        crossings AS (
          SELECT moved.id AS organization_id, moved.ledger_balance + paid.amount AS before, moved.ledger_balance AS after,
                 moved.low_credit_threshold AS threshold, ${now}::bigint AS created_at
          FROM moved, paid
        ),
        ${balanceEvents(sql)}
        SELECT count(*)::int AS released, min(organization_id) AS organization_id, set_config('synchronous_commit', 'off', true) AS async_commit FROM claimed`;
  }

  /**
   * Other instances may be serving: only reservations old enough to belong to a dead request are
   * given back. Idempotency claims are left alone; an abandoned one ages out (abandonedBefore).
   */
  async recoverInFlightWork(now: number): Promise<void> {
    await this.releaseStaleReservations(now);
  }

  /**
   * Gives back the credits of reservations left behind by an instance that died mid-request: those
   * older than STALE_RESERVATION_MS by the database's clock (reservations are dated by it too), so an
   * instance whose clock runs ahead never sweeps a request that is still running elsewhere.
   */
  async releaseStaleReservations(now: number): Promise<number> {
    const stale = await this.client<Array<{ id: string; lease: boolean }>>`
      SELECT id, instance_id IS NOT NULL AS lease FROM reservations
      WHERE CASE WHEN expires_at IS NULL THEN created_at < ${this.databaseNow()} - ${STALE_RESERVATION_MS}::bigint ELSE expires_at < ${this.databaseNow()} END
      ORDER BY created_at`;
    let released = 0;
    for (const { id, lease } of stale) if (await (lease ? this.giveBackLease(id, now, null) : this.releaseReservation(id, now))) released++;
    return released;
  }

  /**
   * Gives a lease back to its buckets (paying the refunds they owe), once its look-ups are settled:
   * until then its row holds their credits. Its row is locked first, so a debit of it in flight
   * (which holds it FOR KEY SHARE) commits before its usage is read, and one that starts meanwhile
   * finds it gone and fails; then its buckets, before the settlement locks the organization's sum,
   * in the order every bucket debit locks them. `owner`: only a lease of that instance (null: any,
   * as the stale sweep gives back a dead instance's). False when the row was gone already.
   */
  private async giveBackLease(leaseId: string, now: number, owner: string | null = this.deps.changes.instanceId): Promise<boolean> {
    return retrying(() =>
      this.client.begin(async (tx) => {
        const [lease] = await tx<Array<{ organization_id: string; allocations: string }>>`
          SELECT organization_id, allocations::text AS allocations FROM reservations
          WHERE id = ${leaseId} AND instance_id = coalesce(${owner}::text, instance_id) FOR UPDATE`;
        if (lease === undefined) return false;
        const bucketIds = (JSON.parse(lease.allocations) as Array<{ bucketId: string }>).map((a) => a.bucketId);
        await tx`SELECT 1 FROM credit_buckets WHERE id = ANY(${bucketIds}::text[]) ORDER BY ${fefo(tx)} FOR UPDATE`;
        const { lookUps } = await settleIn(tx, { leases: [{ organizationId: lease.organization_id, leaseId }] }, BILLED_REASON);
        await this.restoreCredits(tx, tx`DELETE FROM reservations WHERE id = ${leaseId} RETURNING organization_id, allocations`, now);
        // A give-back alone may commit lazily (a lost one is given back again); settled look-ups' ledger rows may not.
        if (lookUps > 0) await tx`SELECT set_config('synchronous_commit', 'on', true)`;
        return true;
      }),
    );
  }

  private readonly availableStatement = this.lazy(() =>
    this.db
      .select({ available: sql<number>`coalesce(sum(${creditBuckets.remaining}), 0)`.mapWith(Number) })
      .from(creditBuckets)
      .where(SPENDABLE_BUCKETS)
      .prepare("available_credits"),
  );

  // A lease taken or given back moves credits between the buckets and the lease: the buckets are read,
  // and the lease's free credits counted, with no take or give-back of this instance's begun in between.
  // The balance as remembered (see spendableSeen) serves as a read, and a read is remembered.
  async availableCredits(organizationId: string, now: number, balance?: BalanceAtKeyRead): Promise<number> {
    for (let known = balance?.spendable ?? this.rememberedSpendable(organizationId); ; known = undefined) {
      const changing = this.leases.changeOf(organizationId);
      if (changing !== undefined) {
        await changing;
        continue;
      }
      const begun = this.leases.changesBegun;
      const spendable = known ?? (await this.readAvailable(organizationId, now));
      if (this.leases.changesBegun === begun) return Math.max(0, spendable - (this.heldHere.get(organizationId) ?? 0)) + this.leases.spare(organizationId, now);
    }
  }

  private async readAvailable(organizationId: string, now: number): Promise<number> {
    const epoch = this.deps.changes.creditsEpoch;
    const { available } = (await this.availableStatement().execute({ organizationId, now }))[0]!;
    this.rememberRead(organizationId, available, epoch);
    return available;
  }

  // A pure read: expired credits are written off by the expiry job (expireBuckets), never by a reader.
  async getBalance(organizationId: string, now: number): Promise<Balance> {
    await this.leases.changeOf(organizationId);
    // One snapshot for buckets and reservations, so a request committing meanwhile is counted once.
    return this.transaction(
      async (tx) => {
        // Spent, expired, written-off and clawed-back buckets are history: the ledger tells it, the balance
        // does not list them. A bucket whose credits are all held by requests in flight is still listed.
        const heldBuckets = sql`(SELECT allocation->>'bucketId' FROM ${reservations}, jsonb_array_elements(${reservations.allocations}) AS allocation WHERE ${reservations.organizationId} = ${organizationId})`;
        const buckets = await tx
          .select(bucketColumns)
          .from(creditBuckets)
          .where(
            and(
              eq(creditBuckets.organizationId, organizationId),
              or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, now)),
              or(gt(creditBuckets.remaining, 0), sql`${creditBuckets.id} IN ${heldBuckets}`),
            ),
          )
          .orderBy(...FEFO);
        const lease = this.leases.usableLease(organizationId, now);
        const [held] = await tx
          .select({
            reserved: sql<number>`coalesce(sum(${reservations.amount}), 0)`.mapWith(Number),
            leased: sql<number>`coalesce(sum(${reservations.amount}) FILTER (WHERE ${reservations.id} = ${lease?.id ?? null}), 0)`.mapWith(Number),
          })
          .from(reservations)
          .where(eq(reservations.organizationId, organizationId));
        // Look-ups debited from leases and not settled yet: their lease's row still holds their credits
        // (rows of an older version, not in a lease, hold their own until their usage rows are written).
        const [unsettled] = await tx
          .select({
            outside: sql<number>`coalesce(sum(${leaseUsage.amount}) FILTER (WHERE NOT ${leaseUsage.inLease}), 0)`.mapWith(Number),
            ofLease: sql<number>`coalesce(sum(${leaseUsage.amount}) FILTER (WHERE ${leaseUsage.leaseId} = ${lease?.id ?? null}), 0)`.mapWith(Number),
          })
          .from(leaseUsage)
          .where(eq(leaseUsage.organizationId, organizationId));
        const inBuckets = buckets.reduce((sum, b) => sum + b.remaining, 0);
        // What this instance's requests in flight hold in memory is still in the buckets; what its
        // lease holds that no request holds is available to them (other instances' leases are reserved).
        const heldHere = Math.min(inBuckets, this.heldHere.get(organizationId) ?? 0);
        // (Only while its row holds what this instance believes, less its unsettled look-ups: a swept lease holds nothing.)
        const spare = lease !== undefined && held!.leased - unsettled!.ofLease === lease.amount ? lease.amount - lease.held : 0;
        return { available: inBuckets - heldHere + spare, reserved: held!.reserved + unsettled!.outside + heldHere - spare, buckets };
      },
      { isolationLevel: "repeatable read", accessMode: "read only" },
    );
  }
}

/** A pending debit held against a lease, as CreditLeases.debit writes it. */
function leasedDebitOf(item: PendingDebit): LeasedDebit {
  const held = item.held!;
  const { usage } = item;
  return {
    lease: held.lease!,
    reservationId: item.reservationId,
    transactionId: item.transactionId,
    organizationId: held.organizationId,
    amount: held.amount,
    keyId: held.keyId,
    requestId: held.requestId,
    gtin: usage.gtin,
    description: usage.description,
    createdAt: usage.now,
    items: usage.items ?? 1,
  };
}
