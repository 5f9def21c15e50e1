// Credit leases on PostgreSQL. An instance serving a busy organization takes a slice of its credits
// out of the buckets into a reservation row of its own (a lease), holds its look-ups' credits
// against that slice in memory, and debits them from it in one statement per group commit that
// locks no bucket and tells no other instance anything: the buckets did not change. It packs the
// look-ups in a lease_usage row per lease and leaves the lease's row as it is; a settlement turns
// the usage into the ledger within half a second and takes its credits out of the lease's row
// (see settleLeaseUsage), so it shares no row with other instances: not even the organization's sum.
//
// Invariants: a lease row is the truth; this instance only spends what its copy says the row holds
// less its look-ups not yet settled, and each debit statement writes only while the row belongs to
// this instance and has not lapsed by the database's clock (it locks the row, so a give-back waits
// for it), else the statement fails whole and its look-ups are debited from the buckets instead
// (the row, whatever it holds, is given back). Leased credits, debited or not, count as reserved
// until settled: ledger sum = buckets + reservation rows (leases among them) at every commit. A
// lease lapses by the database's clock `ms` after it was taken or last renewed by this instance's
// settlement (a dead instance's comes back through the stale sweep), is never spent past its
// earliest bucket's expiry, and is at most 1/share of the organization's spendable credits when
// taken, so other instances rarely find the buckets empty while a lease still holds credits.
import type postgres from "postgres";
import { newId } from "../../lib/ids";
import { retrying } from "../postgres-retry";
import type { Debit } from "./debit-plan";
import { splitAllocations } from "./model";
import { cappedKey, fefo } from "./postgres-debits";
import { type LeaseUsage, leaseUsageWrite, type Renewal, type SettlementScope, type Settled, settleLeaseUsage } from "./postgres-lease-settlement";

/** When an instance takes leases, and how large. */
export interface LeasePolicy {
  /** A lease is at most 1/share of the organization's spendable credits when taken. */
  share: number;
  /** The smallest lease worth taking: an organization with less than share × this spends from its buckets. */
  minCredits: number;
  maxCredits: number;
  /** How long a lease lasts, by the database's clock. */
  ms: number;
  /** An instance stops spending a lease this long before it lapses by the database's answer. */
  marginMs: number;
}

/**
 * When an instance settles its leases' look-ups: at most `ms` after the first waits, and at once
 * when `lookUps` wait (a settlement's work, parsing, planning and sending their ledger rows, runs on
 * the event loop, so its size bounds how long requests wait behind it).
 */
export interface SettlementPolicy {
  ms: number;
  lookUps: number;
}

const DEFAULT_SETTLEMENT_POLICY: SettlementPolicy = { ms: 500, lookUps: 500 };

export const DEFAULT_LEASE_POLICY: LeasePolicy = { share: 8, minCredits: 50, maxCredits: 5_000, ms: 5_000, marginMs: 1_000 };

export interface Lease {
  id: string;
  organizationId: string;
  /** What it holds unspent (its row's credits less its look-ups debited since), and from which buckets, soonest-expiring first. */
  amount: number;
  allocations: Array<{ bucketId: string; amount: number }>;
  /** Credits of it held by this instance's requests in flight. */
  held: number;
  /** Until when (performance.now()) this instance spends it. */
  usableUntil: number;
  /** The earliest expiry of its buckets (the requests' clock): it is not spent from then on. */
  bucketsExpireAt: number | null;
  /** Spent from no more: given back once its holds are settled. */
  retired: boolean;
  /** A debit of it failed, so its row may not hold what this instance believes: its holds are debited from the buckets. */
  lost: boolean;
}

/** A look-up's credits held against a lease, as the lease debit writes them. */
export type LeasedDebit = Omit<Debit, "month" | "allocated"> & { lease: Lease };

export interface CreditLeasesDeps {
  client: postgres.Sql;
  instanceId: string;
  /** Deletes a reservation row and gives its credits back to their buckets (paying refunds they owe). */
  giveBack(leaseId: string, now: number): Promise<unknown>;
  /** A lease of the organization was taken or given back: the credits in its buckets changed. */
  changed(organizationId: string): void;
  reason: string;
}

export class CreditLeases {
  policy: LeasePolicy = DEFAULT_LEASE_POLICY;
  settlement: SettlementPolicy = DEFAULT_SETTLEMENT_POLICY;
  /** What this instance's leases went through (the simulation reports it). */
  readonly counts = { taken: 0, debits: 0, lookUps: 0, lost: 0, givenBack: 0 };
  /** The lease each organization's look-ups hold against now. */
  private readonly current = new Map<string, Lease>();
  private readonly retiring = new Set<Lease>();
  /** Per organization, the take or give-back in flight: its balance is read again after it. */
  private readonly changing = new Map<string, Promise<void>>();

  constructor(private readonly deps: CreditLeasesDeps) {}

  /** Holds `amount` of the organization's current lease, when it is usable and covers it. */
  hold(organizationId: string, amount: number, now: number): Lease | null {
    const lease = this.current.get(organizationId);
    if (lease === undefined || !this.usable(lease, now) || lease.amount - lease.held < amount) return null;
    lease.held += amount;
    return lease;
  }

  private usable(lease: Lease, now: number): boolean {
    return !lease.retired && performance.now() < lease.usableUntil && (lease.bucketsExpireAt === null || now < lease.bucketsExpireAt);
  }

  /** The organization's current lease, while it is usable. */
  usableLease(organizationId: string, now: number): Lease | undefined {
    const lease = this.current.get(organizationId);
    return lease !== undefined && this.usable(lease, now) ? lease : undefined;
  }

  /** Credits of the organization's current lease not held by a request. */
  spare(organizationId: string, now: number): number {
    const lease = this.usableLease(organizationId, now);
    return lease === undefined ? 0 : lease.amount - lease.held;
  }

  /**
   * Gives the organization's current lease back now, if no request holds it (true): a request its
   * buckets alone cannot cover may still be covered by the two together.
   */
  async recall(organizationId: string): Promise<boolean> {
    const lease = this.current.get(organizationId);
    if (lease === undefined || lease.held > 0) return false;
    await this.giveBack(lease);
    return true;
  }

  /** All the time timePassed was told of. */
  private unseenMs = 0;

  /** `ms` passed that this process's monotonic clock did not see (the simulation's clock moved): the leases lapse sooner. */
  timePassed(ms: number): void {
    this.unseenMs += ms;
    for (const lease of [...this.current.values(), ...this.retiring]) lease.usableUntil -= ms;
  }

  /**
   * Until when a lease the database set to last `ms` from a statement sent at `sentAt` is spent:
   * the database ran it after `sentAt` whatever the clocks say; `unseenBefore` is unseenMs then.
   */
  private usableUntilAfter(sentAt: number, unseenBefore: number): number {
    return sentAt + this.policy.ms - this.policy.marginMs - (this.unseenMs - unseenBefore);
  }

  /** The take or give-back of the organization's lease in flight, if any. */
  changeOf(organizationId: string): Promise<void> | undefined {
    return this.changing.get(organizationId);
  }

  /** How many takes and give-backs this instance has begun: a reader of the buckets and the leases compares it before and after. */
  changesBegun = 0;

  /** Runs `work` as the organization's change in flight, after the one before it; says so once it is done (failed or not). */
  private track(organizationId: string, work: Promise<unknown>): Promise<void> {
    this.changesBegun++;
    const done: Promise<void> = Promise.all([this.changing.get(organizationId), work])
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        if (this.changing.get(organizationId) === done) this.changing.delete(organizationId);
        this.deps.changed(organizationId);
      });
    this.changing.set(organizationId, done);
    return done;
  }

  /** Another instance asks for the organization's leases: the current one retires (and goes back once unheld). */
  giveBackOf(organizationId: string): void {
    const lease = this.current.get(organizationId);
    if (lease !== undefined) this.retire(lease);
  }

  /** Another instance's debit left the buckets with `spendable`: below what leases are taken from, this instance's goes back. */
  bucketsLeft(organizationId: string, spendable: number): void {
    const lease = this.current.get(organizationId);
    if (lease !== undefined && spendable < this.policy.share * this.policy.minCredits) this.retire(lease);
  }

  /** A hold let go (its debit written, or its look-up released): a retired lease goes back once nothing holds it. */
  unhold(lease: Lease, amount: number): void {
    lease.held -= amount;
    if (lease.retired && !lease.lost && lease.held === 0) void this.giveBack(lease);
  }

  /**
   * Called with the organization's spendable credits in its buckets (as this instance knows them)
   * after a request: takes a lease in the background when the organization is busy and rich enough
   * and its current lease is missing, running low or lapsing.
   */
  want(organizationId: string, spendable: number, now: number): void {
    this.lastNow = Math.max(this.lastNow, now);
    if (this.changing.has(organizationId)) return;
    const size = Math.min(this.policy.maxCredits, Math.floor(spendable / this.policy.share));
    if (size < this.policy.minCredits) return;
    const lease = this.current.get(organizationId);
    const lasting =
      lease !== undefined && this.usable(lease, now) && lease.amount - lease.held >= size / 4 && performance.now() < lease.usableUntil - this.policy.ms / 3;
    if (lasting) return;
    void this.track(organizationId, this.take(organizationId, size, now));
  }

  /** Resolves once the leases being taken or given back are (or failed). */
  async taken(): Promise<void> {
    await Promise.all(this.changing.values());
  }

  /** Takes a lease of `size` credits from the buckets in FEFO order, if they hold share × size; the previous lease retires. */
  private async take(organizationId: string, size: number, now: number): Promise<void> {
    const id = newId("res", now);
    const [sentAt, unseenBefore] = [performance.now(), this.unseenMs];
    const { client, instanceId } = this.deps;
    const [row] = await client<Array<{ allocations: string | null; buckets_expire_at: string | null }>>`
      WITH locked AS (
        SELECT id, remaining, expires_at FROM credit_buckets
        WHERE organization_id = ${organizationId} AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
        ORDER BY ${fefo(client)}
        FOR UPDATE
      ),
      total AS (SELECT coalesce(sum(remaining), 0)::bigint AS available FROM locked),
      fefo AS (
        SELECT id, remaining, expires_at, row_number() OVER w AS position, (sum(remaining) OVER w - remaining)::bigint AS before
        FROM locked WINDOW w AS (ORDER BY ${fefo(client)})
      ),
      taken AS (
        SELECT id, position, expires_at, least(remaining, ${size}::bigint - before) AS amount
        FROM fefo, total WHERE total.available >= ${size * this.policy.share}::bigint AND before < ${size}
      ),
      debited AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - taken.amount FROM taken WHERE credit_buckets.id = taken.id
      ),
      clock AS (SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS now),
      leased AS (
        INSERT INTO reservations (id, organization_id, amount, allocations, key_id, request_id, created_at, instance_id, expires_at)
        SELECT ${id}, ${organizationId}, ${size}, jsonb_agg(jsonb_build_object('bucketId', id, 'amount', amount) ORDER BY position),
               NULL, 'lease', clock.now, ${instanceId}, clock.now + ${this.policy.ms}
        FROM taken, clock GROUP BY clock.now HAVING count(*) > 0
        RETURNING allocations::text AS allocations
      )
      SELECT (SELECT allocations FROM leased) AS allocations, (SELECT min(expires_at) FROM taken) AS buckets_expire_at`;
    if (row?.allocations == null) return;
    const lease: Lease = {
      id,
      organizationId,
      amount: size,
      allocations: JSON.parse(row.allocations),
      held: 0,
      usableUntil: this.usableUntilAfter(sentAt, unseenBefore),
      bucketsExpireAt: row.buckets_expire_at === null ? null : Number(row.buckets_expire_at),
      retired: false,
      lost: false,
    };
    this.counts.taken++;
    const previous = this.current.get(organizationId);
    this.current.set(organizationId, lease);
    if (previous !== undefined) this.retire(previous);
  }

  /** Spent from no more; given back at once when nothing holds it. */
  retire(lease: Lease): void {
    if (this.current.get(lease.organizationId) === lease) this.current.delete(lease.organizationId);
    if (lease.retired) return;
    lease.retired = true;
    this.retiring.add(lease);
    if (lease.held === 0) void this.giveBack(lease);
  }

  /** A debit of the lease failed: its row goes back now (whatever it holds), and its holds are debited from the buckets. */
  async lose(lease: Lease): Promise<void> {
    if (lease.lost) return;
    this.counts.lost++;
    lease.lost = true;
    await this.giveBack(lease);
  }

  /** The latest request time seen: what a lease given back dates its refund row by, if it pays one. */
  private lastNow = 0;

  /** Spent from no more, and its row given back now. */
  private giveBack(lease: Lease): Promise<void> {
    lease.retired = true;
    if (this.current.get(lease.organizationId) === lease) this.current.delete(lease.organizationId);
    this.retiring.delete(lease);
    this.counts.givenBack++;
    // A lease not given back (the connection lost) lapses, and the stale sweep gives it back.
    return this.track(lease.organizationId, this.deps.giveBack(lease.id, this.lastNow));
  }

  /** Gives every lease back (at shutdown, once no request holds any). */
  async giveAllBack(now: number): Promise<void> {
    await this.taken();
    // Left unsettled when this fails (the connection lost): the next sweep of any instance settles them.
    await this.settleOwn().catch(() => undefined);
    const leases = [...this.current.values(), ...this.retiring];
    this.current.clear();
    this.retiring.clear();
    await Promise.allSettled(leases.map((lease) => this.deps.giveBack(lease.id, now)));
  }

  /**
   * Debits look-ups held against leases in one statement, a transaction of its own, that writes a
   * lease_usage row per lease packing its look-ups (settled into the ledger later, see
   * settleLeaseUsage) and locks its leases' rows FOR KEY SHARE without moving them: it locks no
   * row another instance writes, and a row it does not rewrite costs no new version. It fails whole
   * (and changes nothing) when a lease's row is gone (given back, swept), has lapsed by the
   * database's clock (a refund lapses the leases it takes credits from), or a key of the batch has
   * been capped or revoked meanwhile; the caller then debits the look-ups from the buckets.
   */
  async debit(sql: postgres.Sql, debits: LeasedDebit[]): Promise<void> {
    const rests = new Map<Lease, Array<{ bucketId: string; amount: number }>>();
    const usage: LeaseUsage[] = debits.map((debit) => {
      const { kept, given } = splitAllocations(rests.get(debit.lease) ?? debit.lease.allocations, debit.amount);
      rests.set(debit.lease, given);
      const { lease, reservationId, ...rest } = debit;
      return { ...rest, leaseId: lease.id, allocations: kept };
    });
    const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
    const leases = [...rests].map(([lease, rest]) => ({ lease, rest, amount: rest.reduce((sum, part) => sum + part.amount, 0) }));
    await sql`
      WITH leased AS (
        SELECT id FROM reservations
        WHERE id = ANY(${leases.map((l) => l.lease.id)}::text[]) AND instance_id = ${this.deps.instanceId}
          AND expires_at > (extract(epoch from clock_timestamp()) * 1000)::bigint
        FOR KEY SHARE
      ),
      ${leaseUsageWrite(sql, usage)}
      SELECT CASE WHEN (SELECT count(*) FROM leased) = ${leases.length}
                   AND NOT EXISTS (SELECT 1 FROM api_keys WHERE id = ANY(${keyIds}::text[]) AND ${cappedKey(sql)})
                  THEN 1 ELSE ('a lease or a key changed under the debit: ' || (SELECT count(*) FROM leased) || ' leases')::int END`;
    this.counts.debits++;
    this.counts.lookUps += debits.length;
    for (const { lease, rest, amount } of leases) {
      lease.amount = amount;
      lease.allocations = rest;
    }
    for (const { lease } of leases) this.unsettled.set(lease.id, lease.organizationId);
    this.unsettledLookUps += debits.length;
    this.settleSoon();
  }

  /** The leases (id → organization) whose look-ups this instance debited since its last settlement, and how many look-ups. */
  private readonly unsettled = new Map<string, string>();
  private unsettledLookUps = 0;

  private settleTimer: ReturnType<typeof setTimeout> | null = null;

  /** True while a settlement of this instance's own runs: the next one starts after it. */
  private settlingOwn = false;

  /** True from a failed settlement of its own until one succeeds: the next waits `settlement.ms` whatever the count. */
  private settleFailed = false;

  /** False once stopSettling was called: no settlement is scheduled any more. */
  private settling = true;

  /**
   * Settles this instance's lease usage within `settlement.ms` of its first unsettled debit (or of
   * the end of the settlement running then), at once when `settlement.lookUps` look-ups wait, and
   * `settlement.ms` after a failed one.
   */
  private settleSoon(): void {
    if (!this.settling || this.settlingOwn) return;
    const { ms, lookUps } = this.settlement;
    const due = this.unsettledLookUps >= lookUps && !this.settleFailed ? 0 : ms;
    if (due === 0 && this.settleTimer !== null) this.stopTimer();
    this.settleTimer ??= setTimeout(() => {
      this.settleTimer = null;
      this.settlingOwn = true;
      void this.settleOwn().then(
        () => this.settledOwn(false),
        () => this.settledOwn(true),
      );
    }, due);
  }

  private settledOwn(failed: boolean): void {
    this.settlingOwn = false;
    this.settleFailed = failed;
    if (this.unsettled.size > 0) this.settleSoon();
  }

  private stopTimer(): void {
    if (this.settleTimer !== null) clearTimeout(this.settleTimer);
    this.settleTimer = null;
  }

  /** Settles nothing more on its own: at shutdown, once its leases went back (and in the simulation's kill, as a dead process would). */
  stopSettling(): void {
    this.settling = false;
    this.stopTimer();
  }

  /**
   * Settles the lease usage this instance wrote (a failure leaves it for the next try), and renews
   * the leases it debited: a busy lease lasts `ms` from its last settlement by the database's clock.
   */
  private async settleOwn(): Promise<void> {
    const leases = [...this.unsettled].map(([leaseId, organizationId]) => ({ leaseId, organizationId }));
    const lookUps = this.unsettledLookUps;
    this.unsettled.clear();
    this.unsettledLookUps = 0;
    const [sentAt, unseenBefore] = [performance.now(), this.unseenMs];
    const renewal = { instanceId: this.deps.instanceId, ms: this.policy.ms };
    const { renewed } = await this.settleLeases({ leases }, renewal).catch((error: unknown) => {
      for (const { leaseId, organizationId } of leases) this.unsettled.set(leaseId, organizationId);
      this.unsettledLookUps += lookUps;
      throw error;
    });
    const usableUntil = this.usableUntilAfter(sentAt, unseenBefore);
    const renewedIds = new Set(renewed);
    for (const lease of [...this.current.values(), ...this.retiring])
      if (renewedIds.has(lease.id)) lease.usableUntil = Math.max(lease.usableUntil, usableUntil);
  }

  /** Settles lease usage, any instance's (before a read of an organization's ledger, sums or spending; in the sweeps). */
  async settle(scope: SettlementScope): Promise<number> {
    const { lookUps } = await this.settleLeases(scope);
    return lookUps;
  }

  /** Settles lease usage, and renews this instance's own leases of the scope when given a `renewal`. */
  settleLeases(scope: SettlementScope, renewal?: Renewal): Promise<Settled> {
    return retrying(() => settleLeaseUsage(this.deps.client, scope, this.deps.reason, renewal));
  }
}
