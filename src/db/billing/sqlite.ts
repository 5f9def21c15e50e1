import { and, asc, desc, eq, lt, lte, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { DISPUTED } from "../ledger/reversals";
import { applyPaidGrant, completeOrder, renewSubscription, reversePayment } from "../ledger/operations";
import { type LedgerPort, runSync } from "../ledger/port";
import { invoiceColumns } from "../ledger/sqlite";
import { page } from "../rows";
import * as schema from "../schema/sqlite";
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

type DB = BunSQLiteDatabase<typeof schema>;

/** What the SQLite store lends billing: its write transaction and the ledger port on its connection. */
export interface SQLiteBillingDeps {
  write<T>(work: (db: DB) => T): T;
  ledger: LedgerPort;
}

/**
 * Billing on SQLite: orders, payments, invoices, subscriptions, provider events and Stripe customer
 * ids. Their money effects go through the ledger operations, inside one write transaction each.
 */
export class SQLiteBilling {
  private readonly ledger: LedgerPort;

  constructor(
    private readonly db: DB,
    private readonly deps: SQLiteBillingDeps,
  ) {
    this.ledger = deps.ledger;
  }

  private write<T>(work: (db: DB) => T): T {
    return this.deps.write(work);
  }

  async createOrder(order: NewOrder): Promise<Order> {
    return this.db
      .insert(orders)
      .values({ ...order, status: "pending" })
      .returning()
      .get();
  }

  async getOrder(id: string): Promise<Order | null> {
    return this.db.select().from(orders).where(eq(orders.id, id)).get() ?? null;
  }

  async findOrderByProviderRef(providerRef: string): Promise<Order | null> {
    return this.db.select().from(orders).where(eq(orders.providerRef, providerRef)).get() ?? null;
  }

  async listOrders(query: { organizationId?: string; limit: number; after?: string }): Promise<Page<Order>> {
    const rows = this.db
      .select()
      .from(orders)
      .where(and(query.organizationId ? eq(orders.organizationId, query.organizationId) : undefined, query.after ? lt(orders.id, query.after) : undefined))
      .orderBy(desc(orders.id))
      .limit(query.limit + 1)
      .all();
    return page(rows, query.limit);
  }

  async completeOrder(input: CompleteOrderInput): Promise<CompleteOrderResult> {
    return this.write(() => runSync(completeOrder(input), this.ledger));
  }

  async applyPaidGrant(input: Parameters<Store["applyPaidGrant"]>[0]): Promise<{ applied: boolean; bucket: Bucket | null }> {
    return this.write(() => runSync(applyPaidGrant(input), this.ledger));
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

  private reversePayment(
    event: ProviderEvent | null,
    ref: string,
    report: { refundedAmount?: number; dispute?: DisputeReport },
    description: string,
    now: number,
  ): PaymentReversalResult {
    return this.write(() => runSync(reversePayment({ event, ref, report, description, now }), this.ledger));
  }

  async hasPayment(ref: string): Promise<boolean> {
    return this.db.select({ ref: payments.ref }).from(payments).where(eq(payments.ref, ref)).get() !== undefined;
  }

  async recordProviderEvent(event: ProviderEvent, now: number): Promise<boolean> {
    return this.write(() => this.ledger.claimEvent(event, now));
  }

  async listInvoices(organizationId: string, query: { limit: number; after?: string }): Promise<Page<InvoiceRecord>> {
    const rows = this.db
      .select(invoiceColumns)
      .from(invoices)
      .where(and(eq(invoices.organizationId, organizationId), query.after ? lt(invoices.id, query.after) : undefined))
      .orderBy(desc(invoices.id))
      .limit(query.limit + 1)
      .all();
    return page(rows, query.limit);
  }

  async getInvoice(id: string): Promise<InvoiceRecord | null> {
    return this.db.select(invoiceColumns).from(invoices).where(eq(invoices.id, id)).get() ?? null;
  }

  async listSubscriptions(organizationId: string): Promise<SubscriptionRecord[]> {
    return this.db.select().from(subscriptions).where(eq(subscriptions.organizationId, organizationId)).orderBy(desc(subscriptions.id)).all();
  }

  async listDueSubscriptions(now: number, limit: number): Promise<SubscriptionRecord[]> {
    return this.db
      .select()
      .from(subscriptions)
      .where(and(eq(subscriptions.status, "active"), lte(subscriptions.currentPeriodEnd, now)))
      .orderBy(asc(subscriptions.currentPeriodEnd))
      .limit(limit)
      .all();
  }

  async renewSubscription(input: RenewSubscriptionInput): Promise<{ applied: boolean; bucket: Bucket | null; invoice: InvoiceRecord | null }> {
    return this.write(() => runSync(renewSubscription(input), this.ledger));
  }

  async cancelSubscription(organizationId: string, subscriptionId: string, now: number): Promise<SubscriptionRecord | null> {
    return (
      this.db
        .update(subscriptions)
        .set({ status: "canceled", canceledAt: now })
        .where(and(eq(subscriptions.id, subscriptionId), eq(subscriptions.organizationId, organizationId), eq(subscriptions.status, "active")))
        .returning()
        .get() ?? null
    );
  }

  async getStripeCustomerId(organizationId: string): Promise<string | null> {
    return this.db.select({ id: organizations.stripeCustomerId }).from(organizations).where(eq(organizations.id, organizationId)).get()?.id ?? null;
  }

  async setStripeCustomerId(organizationId: string, customerId: string): Promise<string> {
    this.db
      .update(organizations)
      .set({ stripeCustomerId: customerId })
      .where(and(eq(organizations.id, organizationId), sql`${organizations.stripeCustomerId} IS NULL`))
      .run();
    const stored = await this.getStripeCustomerId(organizationId);
    if (stored === null) throw new Error(`organization ${organizationId} does not exist`);
    return stored;
  }

  async findOrganizationByStripeCustomer(customerId: string): Promise<Organization | null> {
    return (
      this.db
        .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
        .from(organizations)
        .where(eq(organizations.stripeCustomerId, customerId))
        .get() ?? null
    );
  }
}
