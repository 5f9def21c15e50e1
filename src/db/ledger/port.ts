// The ledger port: the few primitives the money operations (operations.ts) are written over. Each
// dialect implements it inside one of its transactions, SQLite synchronously on the serving
// connection, PostgreSQL with awaits; the operations never see which.
import type { InvoiceInput, InvoiceRecord, Order, PaymentInput, ProviderEvent, SubscriptionRecord } from "../billing/records";
import type { Bucket, LedgerTransaction } from "../store";
import type { NewWebhookEvent } from "../webhooks/records";
import type { Reversal } from "./reversals";

/** A ledger row as the operations write it; the port adds the id and the running sum. */
export type LedgerEntry = Omit<LedgerTransaction, "id" | "balanceAfter" | "bucketId" | "keyId" | "requestId" | "gtin"> &
  Partial<Pick<LedgerTransaction, "bucketId" | "keyId" | "requestId" | "gtin">>;

/** A payments row: the credits a payment bought, in one bucket, and what its reversals took back. */
export interface PaymentRow {
  ref: string;
  organizationId: string;
  bucketId: string;
  credits: number;
  amount: number;
  refundedAmount: number;
  refundedCredits: number;
}

/** What a payment's bucket holds when a reversal settles: `free` to take now, `held` by requests in flight. */
export interface SettlementBucket {
  free: number;
  held: number;
  owed: number;
  /** Credits refunds and adjustments took from the bucket so far (positive). */
  taken: number;
  expired: boolean;
}

export interface LedgerPort {
  /** Inserts the provider event's row; false when it was there already (the event was applied before). */
  claimEvent(event: ProviderEvent | null, now: number): boolean;
  /** Serializes everything about one payment ref until the transaction ends (a no-op where writes take turns anyway). */
  lockPayment(ref: string): void;
  getOrder(id: string): Order | null;
  /** pending → completed; null when the order is missing or not pending. */
  completePendingOrder(id: string, now: number): Order | null;
  insertBucket(bucket: Bucket): void;
  /** Appends a ledger row, moves the organization's running sum (with balance events when it falls) and returns the sum after it. */
  appendLedger(entry: LedgerEntry): number;
  /** Writes webhook events into the outbox of this transaction. */
  emit(events: NewWebhookEvent[]): void;
  insertPayment(organizationId: string, bucket: Bucket, payment: PaymentInput, now: number): void;
  insertSubscription(subscription: Omit<SubscriptionRecord, "canceledAt">): SubscriptionRecord;
  /** A paid invoice under the next number without gaps. */
  insertInvoice(organizationId: string, input: InvoiceInput & { orderId: string | null; subscriptionId: string | null }, now: number): InvoiceRecord;
  /** Moves an active subscription's period from `expectedPeriodEnd`; null when it moved already or is not active. */
  advancePeriod(input: { subscriptionId: string; expectedPeriodEnd: number; periodStart: number; periodEnd: number }): SubscriptionRecord | null;
  getPayment(ref: string): PaymentRow | null;
  getReversal(ref: string): Reversal | null;
  putReversal(ref: string, reversal: Reversal, now: number): void;
  setPaymentRefund(ref: string, refunded: { amount: number; credits: number }): void;
  /** Writes off an organization's expired buckets, as expiry rows (what requests in flight hold stays). */
  writeOffExpired(organizationId: string, now: number): void;
  /** Locks a payment's bucket and reads what a settlement needs of it. */
  settlementBucket(organizationId: string, bucketId: string, now: number): SettlementBucket;
  adjustBucket(bucketId: string, delta: number, owed: number): void;
}

/** An invoice's number: its gapless sequence, zero-padded. */
export function invoiceNumber(sequence: number): string {
  return `INV-${String(sequence).padStart(6, "0")}`;
}

/** The columns of an invoices table that make an InvoiceRecord (all but the sequence). */
export function invoiceColumnsOf<T extends Record<keyof InvoiceRecord, unknown>>(table: T): Pick<T, keyof InvoiceRecord> {
  const fields: Array<keyof InvoiceRecord> = [
    "id",
    "organizationId",
    "number",
    "status",
    "amount",
    "currency",
    "description",
    "orderId",
    "subscriptionId",
    "periodStart",
    "periodEnd",
    "createdAt",
    "paidAt",
  ];
  return Object.fromEntries(fields.map((field) => [field, table[field]])) as Pick<T, keyof InvoiceRecord>;
}

/** One port call an operation asks for. */
export interface LedgerCall {
  method: keyof LedgerPort;
  args: unknown[];
}

/** A money operation: yields port calls, gets each answer back, returns its result. */
export type LedgerStep<T> = Generator<LedgerCall, T, unknown>;

type Steps = { [K in keyof LedgerPort]: (...args: Parameters<LedgerPort[K]>) => LedgerStep<ReturnType<LedgerPort[K]>> };

/** The port as the operations call it: `yield* port.claimEvent(event, now)`. */
export const port: Steps = new Proxy({} as Steps, {
  get(_, method: string) {
    return function* call(...args: unknown[]): LedgerStep<unknown> {
      return yield { method: method as keyof LedgerPort, args };
    };
  },
});

/** The port as PostgreSQL implements it: the same primitives, awaited. */
export type AsyncLedgerPort = { [K in keyof LedgerPort]: (...args: Parameters<LedgerPort[K]>) => Promise<ReturnType<LedgerPort[K]>> };

/**
 * Runs an operation to its end synchronously: for SQLite, whose writes must not await inside their
 * transaction (another request would read its uncommitted rows meanwhile).
 */
export function runSync<T>(operation: LedgerStep<T>, implementation: LedgerPort): T {
  let step = operation.next();
  while (!step.done) {
    const method = implementation[step.value.method] as (...args: unknown[]) => unknown;
    step = operation.next(method.apply(implementation, step.value.args));
  }
  return step.value;
}

/** Runs an operation to its end, awaiting each port call in turn: for PostgreSQL, inside its transaction. */
export async function runAsync<T>(operation: LedgerStep<T>, implementation: AsyncLedgerPort): Promise<T> {
  let step = operation.next();
  while (!step.done) {
    const method = implementation[step.value.method] as (...args: unknown[]) => Promise<unknown>;
    step = operation.next(await method.apply(implementation, step.value.args));
  }
  return step.value;
}
