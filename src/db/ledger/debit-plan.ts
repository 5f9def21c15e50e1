import { DAY_MS, HOUR_MS } from "../store";
import { balanceEventTypes } from "../webhooks/records";
import { soleBucket, takeInOrder } from "./allocation";

/** A billed use of credits (a look-up, a watch's event), in batch order. */
export interface Debit {
  reservationId: string;
  transactionId: string;
  organizationId: string;
  amount: number;
  keyId: string | null;
  requestId: string;
  gtin: string | null;
  description: string;
  createdAt: number;
  month: string;
  items: number;
  /**
   * The buckets its credits were allocated from when they were reserved; `inBuckets` when they are
   * still in them (held in memory) rather than taken out already (a reservation row). Absent: the
   * credits are held without an allocation, and the debit takes them from the locked buckets.
   */
  allocated?: { allocations: ReadonlyArray<{ bucketId: string; amount: number }>; inBuckets: boolean };
}

/** What the batch's lock statements read, under the row locks: buckets in FEFO order per organization (those its unallocated debits take from). */
export interface LockedState {
  buckets: Array<{ id: string; organizationId: string; remaining: number }>;
  organizations: Map<string, { ledgerBalance: number; lowCreditThreshold: number | null }>;
  /** Every key of the batch that still exists: its line, and whether its requests must take the capped path now. */
  keys: Map<string, { line: string; capped: boolean }>;
}

/** A usage entry of the ledger: one billed use, its amount negative, the organization's balance after it. */
export interface LedgerEntry {
  id: string;
  organizationId: string;
  amount: number;
  balanceAfter: number;
  bucketId: string | null;
  keyId: string | null;
  requestId: string;
  gtin: string | null;
  description: string;
  createdAt: number;
}

export interface DebitPlan {
  /** Bucket decrements, one per bucket, in lock order. */
  buckets: Array<{ id: string; amount: number }>;
  organizations: Array<{ id: string; amount: number }>;
  ledger: LedgerEntry[];
  counters: Array<{ organizationId: string; periodMs: number; periodStart: number; keyId: string; requests: number; credits: number }>;
  spending: Array<{ line: string; month: string; spent: number }>;
  crossings: Array<{ organizationId: string; before: number; after: number; threshold: number | null; createdAt: number }>;
  committed: string[];
  /** Debits refused because their organization's credits ran out, with what is left. */
  spent: Array<{ reservationId: string; available: number }>;
}

/**
 * The debit of a batch, computed from the rows the batch has locked. Per organization, debits whose
 * credits were allocated when reserved are granted; the others are granted in batch order while the
 * spendable credits cover them and every unallocated debit before them (the first refusal refuses
 * the rest), and their credits come from the buckets in FEFO order. An unallocated debit of a key
 * capped since it was held gets no outcome (its retry takes the capped path). balanceAfter of a row
 * is the organization's sum after the batch plus what its later rows took, so the rows read in order.
 */
export function planDebits(debits: Debit[], locked: LockedState): DebitPlan {
  const plan: DebitPlan = { buckets: [], organizations: [], ledger: [], counters: [], spending: [], crossings: [], committed: [], spent: [] };
  const byOrganization = new Map<string, Debit[]>();
  for (const debit of debits) {
    if (debit.allocated === undefined && debit.keyId !== null && locked.keys.get(debit.keyId)?.capped === true) continue;
    const queue = byOrganization.get(debit.organizationId) ?? [];
    queue.push(debit);
    byOrganization.set(debit.organizationId, queue);
  }
  const granted: Debit[] = [];
  const taken = new Map<string, number>();
  for (const [organizationId, queue] of [...byOrganization].sort(([a], [b]) => (a < b ? -1 : 1))) {
    granted.push(...planOrganization(plan, organizationId, queue, locked, taken));
  }
  plan.buckets = [...taken].map(([id, amount]) => ({ id, amount }));
  plan.ledger.reverse();
  plan.committed = granted.map((debit) => debit.reservationId);
  tallyUsage(plan, granted, locked);
  plan.crossings = plan.crossings.filter((crossing) => balanceEventTypes(crossing.before, crossing.after, crossing.threshold).length > 0);
  return plan;
}

/**
 * One organization's part of the plan: its debits granted, what they take from its buckets (added to
 * `taken`), its sum's move and crossing, and its ledger rows (pushed last row first, the caller
 * reverses). Returns the granted debits.
 */
function planOrganization(plan: DebitPlan, organizationId: string, queue: Debit[], locked: LockedState, taken: Map<string, number>): Debit[] {
  const supply = locked.buckets.filter((bucket) => bucket.organizationId === organizationId).map((bucket) => ({ id: bucket.id, free: bucket.remaining }));
  const spendable = supply.reduce((sum, bucket) => sum + bucket.free, 0);
  let demanded = 0;
  let given = 0;
  const grants: Array<Debit & { bucketId: string | null }> = [];
  const refused: Debit[] = [];
  const take = (bucketId: string, amount: number) => taken.set(bucketId, (taken.get(bucketId) ?? 0) + amount);
  for (const debit of queue) {
    if (debit.allocated !== undefined) {
      const { allocations, inBuckets } = debit.allocated;
      if (inBuckets) for (const allocation of allocations) take(allocation.bucketId, allocation.amount);
      grants.push({ ...debit, bucketId: allocations.length === 1 ? allocations[0]!.bucketId : null });
      continue;
    }
    demanded += debit.amount;
    if (supply.length === 0 || demanded > spendable) {
      refused.push(debit);
      continue;
    }
    // The ledger row names a bucket when the debit's credits all came from one.
    grants.push({ ...debit, bucketId: soleBucket(supply, given, debit.amount) });
    given += debit.amount;
  }
  for (const debit of refused) plan.spent.push({ reservationId: debit.reservationId, available: Math.max(0, spendable - given) });
  if (grants.length === 0) return [];
  for (const part of takeInOrder(supply, given)) take(part.bucketId, part.amount);
  const organization = locked.organizations.get(organizationId);
  if (organization === undefined) throw new Error(`organization ${organizationId} was not locked`);
  const total = grants.reduce((sum, debit) => sum + debit.amount, 0);
  const after = organization.ledgerBalance - total;
  plan.organizations.push({ id: organizationId, amount: total });
  plan.crossings.push({
    organizationId,
    before: organization.ledgerBalance,
    after,
    threshold: organization.lowCreditThreshold,
    createdAt: Math.max(...grants.map((debit) => debit.createdAt)),
  });
  let later = 0;
  for (const debit of grants.toReversed()) {
    const { transactionId: id, amount, bucketId, keyId, requestId, gtin, description, createdAt } = debit;
    plan.ledger.push({ id, organizationId, amount: -amount, balanceAfter: after + later, bucketId, keyId, requestId, gtin, description, createdAt });
    later += amount;
  }
  return grants;
}

/** The usage counters (per hour and per UTC day) and the key lines' monthly spending of the granted look-ups, in one row order. */
function tallyUsage(plan: DebitPlan, granted: Debit[], locked: LockedState): void {
  const counters = new Map<string, DebitPlan["counters"][number]>();
  const spending = new Map<string, DebitPlan["spending"][number]>();
  for (const debit of granted) {
    for (const periodMs of [HOUR_MS, DAY_MS]) {
      const periodStart = debit.createdAt - (debit.createdAt % periodMs);
      const counter = { organizationId: debit.organizationId, periodMs, periodStart, keyId: debit.keyId ?? "", requests: 0, credits: 0 };
      const key = JSON.stringify([counter.organizationId, counter.periodMs, counter.periodStart, counter.keyId]);
      const total = counters.get(key) ?? counter;
      total.requests += debit.items;
      total.credits += debit.amount;
      counters.set(key, total);
    }
    const line = debit.keyId === null ? undefined : locked.keys.get(debit.keyId)?.line;
    if (line === undefined) continue;
    const key = JSON.stringify([line, debit.month]);
    const total = spending.get(key) ?? { line, month: debit.month, spent: 0 };
    total.spent += debit.amount;
    spending.set(key, total);
  }
  // Rows in one order, so batches of several instances lock them alike.
  plan.counters = [...counters.values()].sort((a, b) =>
    compare([a.organizationId, a.periodMs, a.periodStart, a.keyId], [b.organizationId, b.periodMs, b.periodStart, b.keyId]),
  );
  plan.spending = [...spending.values()].sort((a, b) => compare([a.line, a.month], [b.line, b.month]));
}

function compare(a: Array<string | number>, b: Array<string | number>): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  return 0;
}
