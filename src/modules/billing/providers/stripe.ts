import type Stripe from "stripe";
import type { InvoiceStatus, NewOrder, Order, ProviderEvent } from "../../../db/billing/records";
import type { DisputeReport, Store } from "../../../db/store";
import type { Clock } from "../../../lib/clock";
import type { Logger } from "../../../lib/logger";
import { Problem } from "../../../http/problem";
import type { Catalog } from "../catalog";
import { packGrant, periodGrant } from "../grants";
import { addIntervals } from "../periods";
import type { InvoiceView, PaymentProvider, WebhookOutcome } from "./provider";

export interface StripeProviderDeps {
  stripe: Stripe;
  webhookSecret: string;
  store: Store;
  clock: Clock;
  catalog: Catalog;
  logger: Logger;
}

const UNAVAILABLE = {
  en: "The payment provider is unavailable; try again shortly.",
  fr: "Le prestataire de paiement est indisponible ; réessayez dans un instant.",
};
const BAD_SIGNATURE = { en: "The Stripe-Signature header does not verify this payload.", fr: "L'en-tête Stripe-Signature ne vérifie pas ce contenu." };
const INVALID_CURSOR = { en: "cursor is not a nextCursor of this list.", fr: "cursor n'est pas un nextCursor de cette liste." };

const STATUS: Record<string, InvoiceStatus> = { draft: "draft", open: "open", paid: "paid", void: "void", uncollectible: "open" };

/** What a dispute's status means for its money; inquiries (warning_needs_response, warning_under_review) withdraw none. */
const DISPUTE_STATUS: Partial<Record<Stripe.Dispute.Status, DisputeReport["status"]>> = {
  needs_response: "open",
  under_review: "open",
  won: "won",
  warning_closed: "won",
  lost: "lost",
};

function wholeNumber(value: string | undefined): number | undefined {
  return /^\d{1,10}$/.test(value ?? "") ? Number(value) : undefined;
}

function idOf(value: string | { id: string } | null | undefined): string | null {
  return value === null || value === undefined ? null : typeof value === "string" ? value : value.id;
}

/** Stripe errors say what went wrong on their side; the customer gets a 503, the log the reason. */
async function callStripe<T>(logger: Logger, what: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (error) {
    logger.error("stripe call failed", { call: what, error: error instanceof Error ? error.message : String(error) });
    throw new Problem("unavailable", { detail: UNAVAILABLE });
  }
}

/**
 * Checkout Sessions, Billing Portal and invoices through the official SDK, one Stripe customer per
 * organization. Credits move only when a signature-verified webhook says money moved, and each
 * event id is written in the same transaction as its effect, so a redelivery changes nothing.
 */
export class StripeProvider implements PaymentProvider {
  readonly name = "stripe" as const;

  constructor(private readonly deps: StripeProviderDeps) {}

  /** The organization's customer, created on first need. The idempotency key makes racing creations one customer. */
  private async customerFor(organizationId: string, organizationName: string): Promise<string> {
    const existing = await this.deps.store.getStripeCustomerId(organizationId);
    if (existing !== null) return existing;
    const customer = await callStripe(this.deps.logger, "customers.create", () =>
      this.deps.stripe.customers.create(
        { name: organizationName, metadata: { organizationId } },
        { idempotencyKey: `price-service-customer-${organizationId}` },
      ),
    );
    return this.deps.store.setStripeCustomerId(organizationId, customer.id);
  }

  async startCheckout(input: { order: NewOrder; organizationName: string; successUrl: string; cancelUrl: string }) {
    const { order } = input;
    const customer = await this.customerFor(order.organizationId, input.organizationName);
    const metadata = { orderId: order.id, organizationId: order.organizationId, itemId: order.itemId };
    const common = {
      customer,
      client_reference_id: order.id,
      success_url: input.successUrl,
      cancel_url: input.cancelUrl,
      metadata,
    };
    const priceData = { currency: order.currency.toLowerCase(), unit_amount: order.amount };
    const params: Stripe.Checkout.SessionCreateParams =
      order.kind === "pack"
        ? {
            ...common,
            mode: "payment",
            line_items: [{ quantity: 1, price_data: { ...priceData, product_data: { name: `${order.itemName} (${order.credits} credits)` } } }],
            invoice_creation: { enabled: true },
            payment_intent_data: { metadata },
          }
        : {
            ...common,
            mode: "subscription",
            line_items: [
              {
                quantity: 1,
                price_data: {
                  ...priceData,
                  recurring: { interval: order.interval ?? "month" },
                  product_data: { name: `${order.itemName} (${order.credits} credits per ${order.interval})` },
                },
              },
            ],
            // invoice.paid carries these, so each period is granted without looking anything up.
            subscription_data: {
              metadata: { ...metadata, planName: order.itemName, creditsPerPeriod: String(order.credits), amountPerPeriod: String(order.amount) },
            },
          };
    const session = await callStripe(this.deps.logger, "checkout.sessions.create", () =>
      this.deps.stripe.checkout.sessions.create(params, { idempotencyKey: `price-service-checkout-${order.id}` }),
    );
    if (session.url === null) throw new Problem("unavailable", { detail: UNAVAILABLE });
    return { checkoutUrl: session.url, providerRef: session.id };
  }

  async portalUrl(input: { organizationId: string; organizationName: string; returnUrl: string }): Promise<string> {
    const customer = await this.customerFor(input.organizationId, input.organizationName);
    const session = await callStripe(this.deps.logger, "billingPortal.sessions.create", () =>
      this.deps.stripe.billingPortal.sessions.create({ customer, return_url: input.returnUrl }),
    );
    return session.url;
  }

  async listInvoices(organizationId: string, query: { limit: number; cursor?: string }) {
    if (query.cursor !== undefined && !/^in_[A-Za-z0-9]{1,250}$/.test(query.cursor)) throw new Problem("invalid-parameter", { detail: INVALID_CURSOR });
    const customer = await this.deps.store.getStripeCustomerId(organizationId);
    if (customer === null) return { items: [], nextCursor: null };
    const list = await callStripe(this.deps.logger, "invoices.list", () =>
      this.deps.stripe.invoices.list({ customer, limit: query.limit, ...(query.cursor ? { starting_after: query.cursor } : {}) }),
    );
    const items = list.data.map(
      (invoice): InvoiceView => ({
        id: invoice.id,
        number: invoice.number,
        status: STATUS[invoice.status ?? "draft"] ?? "open",
        total: { amount: invoice.total, currency: invoice.currency.toUpperCase() },
        createdAt: invoice.created * 1000,
        hostedUrl: invoice.hosted_invoice_url ?? null,
        pdfUrl: invoice.invoice_pdf ?? null,
      }),
    );
    return { items, nextCursor: list.has_more && items.length > 0 ? items[items.length - 1]!.id : null };
  }

  /** Stripe renews subscriptions itself and reports each paid period with invoice.paid. */
  async renewSubscriptions(): Promise<number> {
    return 0;
  }

  async receiveWebhook(payload: string, signature: string | null): Promise<WebhookOutcome> {
    let event: Stripe.Event;
    try {
      event = await this.deps.stripe.webhooks.constructEventAsync(payload, signature ?? "", this.deps.webhookSecret);
    } catch {
      throw new Problem("invalid-body", { detail: BAD_SIGNATURE });
    }
    const applied = await this.apply(event);
    this.deps.logger.info("stripe event", { eventId: event.id, type: event.type, applied });
    return { received: true, applied };
  }

  private async apply(event: Stripe.Event): Promise<boolean> {
    switch (event.type) {
      case "checkout.session.completed":
      case "checkout.session.async_payment_succeeded":
        return this.onCheckoutPaid(event, event.data.object);
      case "invoice.paid":
        return this.onInvoicePaid(event, event.data.object);
      case "charge.refunded":
        return this.onChargeRefunded(event, event.data.object);
      case "charge.dispute.created":
      case "charge.dispute.updated":
      case "charge.dispute.funds_withdrawn":
      case "charge.dispute.funds_reinstated":
      case "charge.dispute.closed":
        return this.onDispute(event, event.data.object);
      default:
        return false;
    }
  }

  private async ignore(event: Stripe.Event, reason: string): Promise<false> {
    this.deps.logger.warn("stripe event ignored", { eventId: event.id, type: event.type, reason });
    await this.deps.store.recordProviderEvent({ id: event.id, type: event.type }, this.deps.clock.now());
    return false;
  }

  /** A paid checkout completes its order; a pack is granted now, a subscription by its invoices. */
  private async onCheckoutPaid(event: Stripe.Event, session: Stripe.Checkout.Session): Promise<boolean> {
    const order: Order | null = await this.deps.store.findOrderByProviderRef(session.id);
    if (order === null) return this.ignore(event, "no order for this checkout session");
    // Delayed payment methods complete the session unpaid; checkout.session.async_payment_succeeded follows.
    if (session.payment_status === "unpaid") return this.ignore(event, "checkout completed, payment pending");
    const now = this.deps.clock.now();
    const paymentIntent = idOf(session.payment_intent);
    const result = await this.deps.store.completeOrder({
      orderId: order.id,
      now,
      event: { id: event.id, type: event.type },
      grant: order.kind === "pack" ? packGrant(order, now) : null,
      payment:
        order.kind === "pack" && paymentIntent !== null ? { ref: paymentIntent, amount: session.amount_total ?? order.amount, currency: order.currency } : null,
      subscription: null,
      invoice: null,
    });
    return result.applied;
  }

  /** Each paid period of a subscription grants its credits, expiring when the period ends. */
  private async onInvoicePaid(event: Stripe.Event, invoice: Stripe.Invoice): Promise<boolean> {
    const details = invoice.parent?.subscription_details;
    if (!details) return this.ignore(event, "not a subscription invoice (packs are granted at checkout)");
    const metadata = details.metadata ?? {};
    const customerId = idOf(invoice.customer);
    const organization =
      (metadata.organizationId ? await this.deps.store.getOrganization(metadata.organizationId) : null) ??
      (customerId ? await this.deps.store.findOrganizationByStripeCustomer(customerId) : null);
    if (organization === null) return this.ignore(event, "no organization for this invoice");
    // Only the first invoice and each renewal pay a period; prorations of a plan change and manual
    // invoices grant nothing (a change takes effect with the next period).
    if (invoice.billing_reason !== "subscription_create" && invoice.billing_reason !== "subscription_cycle") {
      return this.ignore(event, `a ${invoice.billing_reason ?? "manual"} invoice pays no period`);
    }
    if (invoice.amount_paid <= 0) return this.ignore(event, "nothing paid");
    const plan = this.deps.catalog.plans.find((candidate) => candidate.id === metadata.itemId);
    const perPeriod = wholeNumber(metadata.creditsPerPeriod) ?? plan?.creditsPerPeriod;
    const pricePerPeriod = wholeNumber(metadata.amountPerPeriod) ?? plan?.price.amount;
    if (perPeriod === undefined || perPeriod < 1 || pricePerPeriod === undefined)
      return this.ignore(event, "no credits or price per period on the subscription");
    // Credits follow the money: less than the period's price (a discount, the customer's balance)
    // grants the same share of the period's credits, never more than one period.
    const credits = invoice.amount_paid >= pricePerPeriod ? perPeriod : Number((BigInt(perPeriod) * BigInt(invoice.amount_paid)) / BigInt(pricePerPeriod));
    if (credits < 1) return this.ignore(event, "too little paid for a credit");
    const now = this.deps.clock.now();
    const periodEnd = invoice.lines.data.find((line) => line.period?.end)?.period.end;
    const expiresAt = periodEnd ? periodEnd * 1000 : addIntervals(now, plan?.interval ?? "month", 1);
    const result = await this.deps.store.applyPaidGrant({
      event: { id: event.id, type: event.type },
      organizationId: organization.id,
      grant: periodGrant({ name: metadata.planName ?? plan?.name ?? "subscription", credits }, expiresAt),
      payment: { ref: invoice.id, amount: invoice.amount_paid, currency: invoice.currency.toUpperCase() },
      now,
    });
    return result.applied;
  }

  /**
   * The refs under which a payment's credits are (or will be) recorded: the PaymentIntent of a pack,
   * or the invoice a subscription period was paid by, which Stripe tells. A refund or dispute may
   * arrive before the grant, when it is not known which of the two the payment will be recorded by
   * (a pack's checkout creates an invoice too), so it is then kept under both; only one of them ever
   * gets a payment.
   */
  private async paymentRefs(paymentIntent: string): Promise<string[]> {
    if (await this.deps.store.hasPayment(paymentIntent)) return [paymentIntent];
    const found = await callStripe(this.deps.logger, "invoicePayments.list", () =>
      this.deps.stripe.invoicePayments.list({ payment: { type: "payment_intent", payment_intent: paymentIntent }, limit: 1 }),
    );
    const invoice = idOf(found.data[0]?.invoice);
    if (invoice === null) return [paymentIntent];
    return (await this.deps.store.hasPayment(invoice)) ? [invoice] : [invoice, paymentIntent];
  }

  /**
   * Applies a refund or dispute report to each ref of its payment. Reports are idempotent (amounts
   * only move forward, final dispute states stay), so all refs but the last take it without the
   * event, and the last records the event: a redelivery after a failure in between repeats them all.
   */
  private async reverse(
    event: Stripe.Event,
    paymentIntent: string,
    apply: (ref: string, event: ProviderEvent | null) => Promise<{ applied: boolean }>,
  ): Promise<boolean> {
    const refs = await this.paymentRefs(paymentIntent);
    for (const ref of refs.slice(0, -1)) await apply(ref, null);
    return (await apply(refs[refs.length - 1]!, { id: event.id, type: event.type })).applied;
  }

  /** A refund claws back what is still unspent of the credits its payment granted, in proportion to the money. */
  private async onChargeRefunded(event: Stripe.Event, charge: Stripe.Charge): Promise<boolean> {
    const paymentIntent = idOf(charge.payment_intent);
    if (paymentIntent === null) return this.ignore(event, "charge without a payment intent");
    return this.reverse(event, paymentIntent, (ref, providerEvent) =>
      this.deps.store.refundPayment({
        event: providerEvent,
        ref,
        refundedAmount: charge.amount_refunded,
        description: "Payment refunded: unspent credits withdrawn",
        now: this.deps.clock.now(),
      }),
    );
  }

  /**
   * A dispute withdraws the money from the moment it opens: its credits are clawed back like a
   * refund's, and given back if the dispute is won. Inquiries (warning_*) move no money.
   */
  private async onDispute(event: Stripe.Event, dispute: Stripe.Dispute): Promise<boolean> {
    const paymentIntent = idOf(dispute.payment_intent);
    if (paymentIntent === null) return this.ignore(event, "dispute without a payment intent");
    const status =
      event.type === "charge.dispute.funds_reinstated"
        ? "won"
        : event.type === "charge.dispute.funds_withdrawn"
          ? "open"
          : (DISPUTE_STATUS[dispute.status] ?? null);
    if (status === null) return this.ignore(event, "an inquiry withdraws no money");
    return this.reverse(event, paymentIntent, (ref, providerEvent) =>
      this.deps.store.disputePayment({ event: providerEvent, ref, dispute: { id: dispute.id, amount: dispute.amount, status }, now: this.deps.clock.now() }),
    );
  }
}
