import type { InvoiceStatus, NewOrder, ProviderName } from "../../../db/billing/records";
import type { Page } from "../../../db/store";

/** An invoice as the API shows it, whichever provider keeps it. */
export interface InvoiceView {
  id: string;
  number: string | null;
  status: InvoiceStatus;
  total: { amount: number; currency: string };
  createdAt: number;
  hostedUrl: string | null;
  pdfUrl: string | null;
}

export interface WebhookOutcome {
  received: true;
  /** False for events that change nothing here: unknown types, replays, orders of another system. */
  applied: boolean;
}

/**
 * What the billing endpoints need from whoever takes the money. `local` keeps everything in this
 * service; `stripe` delegates checkout, portal and invoices to Stripe and learns about payments
 * from signed webhooks.
 */
export interface PaymentProvider {
  readonly name: ProviderName;
  /** Opens the checkout of a new (not yet stored) order: where to send the customer, and the provider's id for it. */
  startCheckout(input: {
    order: NewOrder;
    organizationName: string;
    successUrl: string;
    cancelUrl: string;
  }): Promise<{ checkoutUrl: string; providerRef: string | null }>;
  /** A URL of the billing portal for the organization. */
  portalUrl(input: { organizationId: string; organizationName: string; returnUrl: string }): Promise<string>;
  /** Newest first; `cursor` is a nextCursor this provider returned. */
  listInvoices(organizationId: string, query: { limit: number; cursor?: string }): Promise<Page<InvoiceView>>;
  /** Grants and invoices the periods that started since the last run; returns how many. */
  renewSubscriptions(now: number): Promise<number>;
  /** Verifies and applies a webhook delivery; absent when the provider has no webhooks. */
  receiveWebhook?(payload: string, signature: string | null): Promise<WebhookOutcome>;
}
