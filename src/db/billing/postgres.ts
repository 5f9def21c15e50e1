import { and, asc, desc, eq, isNull, lt, lte } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { DISPUTED } from "../ledger/reversals";
import { applyPaidGrant, completeOrder, renewSubscription, reversePayment } from "../ledger/operations";
import type { AsyncLedgerPort, LedgerStep } from "../ledger/port";
import { invoiceColumns } from "../ledger/postgres";
import { page } from "../rows";
import * as schema from "../schema/postgres";
import type { Bucket, DisputeReport, Organization, Page, PaymentReversalResult, Store } from "../store";
import type {
  CompleteOrderInput,
  CompleteOrderResult,
  InvoiceRecord,
  NewOrder,
  Order,
  ProviderEvent,
  RenewSubscriptionInput,
  SubscriptionRecord,
} from "./records";

const { organizations, orders, subscriptions, invoices, payments } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

/** What the PostgreSQL store lends billing: its retrying transaction, a money operation in one, and the ledger port on a transaction. */
export interface PostgresBillingDeps {
  transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T>;
  money<T>(operation: () => LedgerStep<T>): Promise<T>;
  ledger(tx: Tx): AsyncLedgerPort;
}

/**
 * Billing on PostgreSQL: orders, payments, invoices, subscriptions, provider events and Stripe
 * customer ids. Their money effects go through the ledger operations, one transaction each.
 */
export class PostgresBilling {
  constructor(
    private readonly db: DB,
    private readonly deps: PostgresBillingDeps,
  ) {}

  private transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return this.deps.transaction(work, config);
  }

  private money<T>(operation: () => LedgerStep<T>): Promise<T> {
    return this.deps.money(operation);
  }

  private ledger(tx: Tx): AsyncLedgerPort {
    return this.deps.ledger(tx);
  }

  async createOrder(order: NewOrder): Promise<Order> {
    const [created] = await this.db
      .insert(orders)
      .values({ ...order, status: "pending" })
      .returning();
    return created!;
  }

  async getOrder(id: string): Promise<Order | null> {
    const [order] = await this.db.select().from(orders).where(eq(orders.id, id));
    return order ?? null;
  }

  async findOrderByProviderRef(providerRef: string): Promise<Order | null> {
    const [order] = await this.db.select().from(orders).where(eq(orders.providerRef, providerRef));
    return order ?? null;
  }

  async listOrders(query: { organizationId?: string; limit: number; after?: string }): Promise<Page<Order>> {
    const rows = await this.db
      .select()
      .from(orders)
      .where(and(query.organizationId ? eq(orders.organizationId, query.organizationId) : undefined, query.after ? lt(orders.id, query.after) : undefined))
      .orderBy(desc(orders.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  async completeOrder(input: CompleteOrderInput): Promise<CompleteOrderResult> {
    return this.money(() => completeOrder(input));
  }

  async applyPaidGrant(input: Parameters<Store["applyPaidGrant"]>[0]): Promise<{ applied: boolean; bucket: Bucket | null }> {
    return this.money(() => applyPaidGrant(input));
  }

  async refundPayment(input: {
    event: ProviderEvent | null;
    ref: string;
    refundedAmount: number;
    description: string;
    now: number;
  }): Promise<PaymentReversalResult> {
    return this.reversePayment(input.event, input.ref, { refundedAmount: input.refundedAmount }, input.description, input.now);
  }

  async disputePayment(input: { event: ProviderEvent | null; ref: string; dispute: DisputeReport; now: number }): Promise<PaymentReversalResult> {
    return this.reversePayment(input.event, input.ref, { dispute: input.dispute }, DISPUTED, input.now);
  }

  private async reversePayment(
    event: ProviderEvent | null,
    ref: string,
    report: { refundedAmount?: number; dispute?: DisputeReport },
    description: string,
    now: number,
  ): Promise<PaymentReversalResult> {
    return this.money(() => reversePayment({ event, ref, report, description, now }));
  }

  async hasPayment(ref: string): Promise<boolean> {
    const [row] = await this.db.select({ ref: payments.ref }).from(payments).where(eq(payments.ref, ref));
    return row !== undefined;
  }

  async recordProviderEvent(event: ProviderEvent, now: number): Promise<boolean> {
    return this.transaction((tx) => this.ledger(tx).claimEvent(event, now));
  }

  async listInvoices(organizationId: string, query: { limit: number; after?: string }): Promise<Page<InvoiceRecord>> {
    const rows = await this.db
      .select(invoiceColumns)
      .from(invoices)
      .where(and(eq(invoices.organizationId, organizationId), query.after ? lt(invoices.id, query.after) : undefined))
      .orderBy(desc(invoices.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  async getInvoice(id: string): Promise<InvoiceRecord | null> {
    const [invoice] = await this.db.select(invoiceColumns).from(invoices).where(eq(invoices.id, id));
    return invoice ?? null;
  }

  async listSubscriptions(organizationId: string): Promise<SubscriptionRecord[]> {
    return this.db.select().from(subscriptions).where(eq(subscriptions.organizationId, organizationId)).orderBy(desc(subscriptions.id));
  }

  async listDueSubscriptions(now: number, limit: number): Promise<SubscriptionRecord[]> {
    return this.db
      .select()
      .from(subscriptions)
      .where(and(eq(subscriptions.status, "active"), lte(subscriptions.currentPeriodEnd, now)))
      .orderBy(asc(subscriptions.currentPeriodEnd))
      .limit(limit);
  }

  async renewSubscription(input: RenewSubscriptionInput): Promise<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }> {
    return this.money(() => renewSubscription(input));
  }

  async cancelSubscription(organizationId: string, subscriptionId: string, now: number): Promise<SubscriptionRecord | null> {
    const [subscription] = await this.db
      .update(subscriptions)
      .set({ status: "canceled", canceledAt: now })
      .where(and(eq(subscriptions.id, subscriptionId), eq(subscriptions.organizationId, organizationId), eq(subscriptions.status, "active")))
      .returning();
    return subscription ?? null;
  }

  async getStripeCustomerId(organizationId: string): Promise<string | null> {
    const [row] = await this.db.select({ id: organizations.stripeCustomerId }).from(organizations).where(eq(organizations.id, organizationId));
    return row?.id ?? null;
  }

  async setStripeCustomerId(organizationId: string, customerId: string): Promise<string> {
    await this.db
      .update(organizations)
      .set({ stripeCustomerId: customerId })
      .where(and(eq(organizations.id, organizationId), isNull(organizations.stripeCustomerId)));
    const stored = await this.getStripeCustomerId(organizationId);
    if (stored === null) throw new Error(`organization ${organizationId} does not exist`);
    return stored;
  }

  async findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null> {
    const [row] = await this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.stripeCustomerId, customerId));
    return row ?? null;
  }
}
