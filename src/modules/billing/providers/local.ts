import type { Store } from "../../../db/store";
import type { Logger } from "../../../lib/logger";
import { Problem } from "../../../http/problem";
import { orderInvoice, periodGrant } from "../grants";
import { periodContaining } from "../periods";
import type { InvoiceView, PaymentProvider } from "./provider";

const RENEWAL_BATCH = 100;

export const INVALID_CURSOR = { en: "cursor is not a nextCursor of this list.", fr: "cursor n'est pas un nextCursor de cette liste." };

/**
 * The provider that needs nobody else: the checkout page, the portal and the printable invoices are
 * pages of this service (src/modules/billing/pages.ts), and subscriptions renew by a periodic job.
 */
export class LocalProvider implements PaymentProvider {
  readonly name = "local" as const;

  constructor(private readonly deps: { store: Store; publicUrl: string; logger: Logger }) {}

  async startCheckout(input: { order: { id: string } }) {
    return { checkoutUrl: `${this.deps.publicUrl}/billing/checkout/${input.order.id}`, providerRef: null };
  }

  async portalUrl(input: { returnUrl: string }): Promise<string> {
    return `${this.deps.publicUrl}/billing/portal?return=${encodeURIComponent(input.returnUrl)}`;
  }

  async listInvoices(organizationId: string, query: { limit: number; cursor?: string }) {
    if (query.cursor !== undefined && !/^inv_[a-z0-9]{1,64}$/.test(query.cursor)) throw new Problem("invalid-parameter", { detail: INVALID_CURSOR });
    const page = await this.deps.store.listInvoices(organizationId, { limit: query.limit, after: query.cursor });
    const items = page.items.map(
      (invoice): InvoiceView => ({
        id: invoice.id,
        number: invoice.number,
        status: invoice.status,
        total: { amount: invoice.amount, currency: invoice.currency },
        createdAt: invoice.createdAt,
        hostedUrl: `${this.deps.publicUrl}/billing/invoices/${invoice.id}`,
        // No PDF is rendered: the hosted page is printable (print to PDF from the browser).
        pdfUrl: null,
      }),
    );
    return { items, nextCursor: page.nextCursor };
  }

  /**
   * Starts the current period of every active subscription whose period ended: one grant expiring
   * at the new period's end and one paid invoice. Periods missed while the service was down are
   * skipped, not granted: their credits would be expired already.
   */
  async renewSubscriptions(now: number): Promise<number> {
    let renewed = 0;
    for (;;) {
      const due = await this.deps.store.listDueSubscriptions(now, RENEWAL_BATCH);
      for (const subscription of due) {
        const period = periodContaining(subscription.startedAt, subscription.interval, now);
        const result = await this.deps.store.renewSubscription({
          subscriptionId: subscription.id,
          expectedPeriodEnd: subscription.currentPeriodEnd,
          periodStart: period.start,
          periodEnd: period.end,
          grant: periodGrant({ name: subscription.planName, credits: subscription.creditsPerPeriod }, period.end),
          invoice: orderInvoice(
            {
              kind: "subscription",
              itemName: subscription.planName,
              credits: subscription.creditsPerPeriod,
              interval: subscription.interval,
              amount: subscription.amount,
              currency: subscription.currency,
            },
            period,
          ),
          now,
        });
        if (result.applied) renewed++;
      }
      if (due.length < RENEWAL_BATCH) break;
    }
    if (renewed > 0) this.deps.logger.info("subscriptions renewed", { renewed });
    return renewed;
  }
}
