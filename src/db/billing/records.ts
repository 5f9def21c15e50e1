// Records of the billing section of the Store (orders, invoices, subscriptions, payments, provider
// events), kept apart from store.ts so the billing and auth sections merge without touching each other.
import type { Bucket, BucketSource, TransactionType } from "../store";

export type OrderKind = "pack" | "subscription";
export type OrderStatus = "pending" | "completed";
export type PlanInterval = "month" | "year";
export type ProviderName = "local" | "stripe";
export type InvoiceStatus = "draft" | "open" | "paid" | "void";
export type SubscriptionStatus = "active" | "canceled";

/** A checkout; `id` is the checkoutId. Item details are a snapshot of the catalog when it started. */
export interface Order {
  id: string;
  organizationId: string;
  userId: string | null;
  kind: OrderKind;
  itemId: string;
  itemName: string;
  credits: number;
  interval: PlanInterval | null;
  validityDays: number | null;
  amount: number;
  currency: string;
  status: OrderStatus;
  provider: ProviderName;
  providerRef: string | null;
  successUrl: string | null;
  cancelUrl: string | null;
  createdAt: number;
  completedAt: number | null;
}

export type NewOrder = Omit<Order, "status" | "completedAt">;

export interface InvoiceRecord {
  id: string;
  organizationId: string;
  number: string;
  status: InvoiceStatus;
  amount: number;
  currency: string;
  description: string;
  orderId: string | null;
  subscriptionId: string | null;
  periodStart: number | null;
  periodEnd: number | null;
  createdAt: number;
  paidAt: number | null;
}

export interface SubscriptionRecord {
  id: string;
  organizationId: string;
  orderId: string;
  planId: string;
  planName: string;
  creditsPerPeriod: number;
  interval: PlanInterval;
  amount: number;
  currency: string;
  status: SubscriptionStatus;
  startedAt: number;
  currentPeriodStart: number;
  currentPeriodEnd: number;
  canceledAt: number | null;
  createdAt: number;
}

/** Credits to grant as one bucket and its ledger row. */
export interface CreditGrant {
  source: BucketSource;
  type: TransactionType;
  amount: number;
  expiresAt: number | null;
  description: string;
}

/** The payment behind a grant, kept so that a refund can find the bucket it paid for. */
export interface PaymentInput {
  ref: string;
  amount: number;
  currency: string;
}

/** A payment-provider event; its id is recorded with its effect so a redelivery changes nothing. */
export interface ProviderEvent {
  id: string;
  type: string;
}

/** A paid invoice written by the local provider; the number is allocated by the store. */
export interface InvoiceInput {
  description: string;
  amount: number;
  currency: string;
  periodStart: number | null;
  periodEnd: number | null;
}

export interface CompleteOrderInput {
  orderId: string;
  now: number;
  /** Set when a provider event completes the order (Stripe webhooks). */
  event: ProviderEvent | null;
  grant: CreditGrant | null;
  payment: PaymentInput | null;
  /** Local subscriptions: the first period, starting now. */
  subscription: { periodEnd: number } | null;
  invoice: InvoiceInput | null;
}

export interface CompleteOrderResult {
  /** False when the order was already completed or the event was already applied: nothing was written. */
  applied: boolean;
  order: Order | null;
  bucket: Bucket | null;
  invoice: InvoiceRecord | null;
  subscription: SubscriptionRecord | null;
}

export interface RenewSubscriptionInput {
  subscriptionId: string;
  /** The period end the caller saw; the renewal applies only if it is still current (exactly once). */
  expectedPeriodEnd: number;
  periodStart: number;
  periodEnd: number;
  grant: CreditGrant;
  invoice: InvoiceInput;
  now: number;
}
