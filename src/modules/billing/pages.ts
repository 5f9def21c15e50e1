// HTML pages of the local provider: checkout (with a Pay button in development mode), printable
// invoice, billing portal. No script and no external asset; every dynamic value is escaped.
import type { InvoiceRecord, Order, SubscriptionRecord } from "../../db/billing-records";
import type { Language } from "../../http/i18n";
import { money } from "../../lib/money";

export function escapeHTML(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export const PAGE_HEADERS = {
  "content-type": "text/html; charset=utf-8",
  // Browsers send `Origin: null` with a form post from a no-referrer page, which the CSRF check
  // refuses: same-origin lets the Pay and Cancel forms say where they come from, and still sends
  // nothing to other sites.
  "referrer-policy": "same-origin",
  "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
  "cache-control": "no-store",
};

const STYLE = `body{font:16px/1.5 system-ui,sans-serif;max-width:42rem;margin:2.5rem auto;padding:0 1rem;color:#1a1a1a}
h1{font-size:1.6rem;margin-bottom:.25rem}.muted{color:#666}.box{border:1px solid #ddd;border-radius:8px;padding:1rem 1.25rem;margin:1.25rem 0}
table{width:100%;border-collapse:collapse}td,th{text-align:left;padding:.4rem .25rem;border-bottom:1px solid #eee}td.num,th.num{text-align:right}
button{font:inherit;padding:.6rem 1.4rem;border:0;border-radius:6px;background:#1f5fd6;color:#fff;cursor:pointer}button.secondary{background:#eee;color:#1a1a1a}
.status{display:inline-block;padding:.1rem .5rem;border-radius:4px;background:#eee;font-size:.85rem;text-transform:uppercase}.paid,.active{background:#d7f5dd}
code{background:#f2f2f2;padding:.1rem .3rem}@media print{.noprint{display:none}body{margin:0}}`;

function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${escapeHTML(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

function price(amount: number, currency: string, language: Language): string {
  return escapeHTML(money(amount, currency, language).formatted);
}

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

export function checkoutPage(input: { order: Order; organizationName: string; language: Language; canPay: boolean }): string {
  const { order, language } = input;
  const what = order.kind === "pack" ? `${order.credits.toLocaleString("en-US")} credits` : `${order.credits.toLocaleString("en-US")} credits every ${order.interval}`;
  const total = price(order.amount, order.currency, language);
  let action: string;
  if (order.status === "completed") {
    action = `<p><span class="status paid">Paid</span> on ${day(order.completedAt ?? order.createdAt)}. The credits are in your balance; the invoice is in the <a href="/billing/portal">billing portal</a>.</p>`;
  } else if (input.canPay) {
    action = `<form method="post" action="/billing/checkout/${escapeHTML(order.id)}/pay"><button type="submit">Pay ${total}</button></form>
<p class="muted">Development mode: this button completes the order without taking any money.</p>`;
  } else {
    action = `<p><span class="status">Awaiting payment</span></p><p>An operator completes this order once payment is received: <code>price-service orders complete ${escapeHTML(order.id)}</code>.</p>`;
  }
  const cancel = order.status === "pending" && order.cancelUrl ? `<p class="noprint"><a href="${escapeHTML(order.cancelUrl)}">Cancel and go back</a></p>` : "";
  return page(
    `Checkout ${order.itemName}`,
    `<h1>Checkout</h1><p class="muted">${escapeHTML(input.organizationName)} · order <code>${escapeHTML(order.id)}</code></p>
<div class="box"><table><tr><th>${escapeHTML(order.itemName)}</th><td>${escapeHTML(what)}</td><td class="num">${total}</td></tr>
<tr><th>Total</th><td></td><td class="num"><strong>${total}</strong></td></tr></table></div>${action}${cancel}`,
  );
}

export function invoicePage(input: { invoice: InvoiceRecord; organizationName: string; organizationId: string; issuer: string; language: Language }): string {
  const { invoice, language } = input;
  const total = price(invoice.amount, invoice.currency, language);
  const period = invoice.periodStart !== null && invoice.periodEnd !== null ? `<br><span class="muted">Period ${day(invoice.periodStart)} to ${day(invoice.periodEnd)}</span>` : "";
  return page(
    `Invoice ${invoice.number}`,
    `<h1>Invoice ${escapeHTML(invoice.number)}</h1><p><span class="status ${escapeHTML(invoice.status)}">${escapeHTML(invoice.status)}</span></p>
<div class="box"><table>
<tr><th>Issued by</th><td>${escapeHTML(input.issuer)}</td></tr>
<tr><th>Billed to</th><td>${escapeHTML(input.organizationName)} <span class="muted">(${escapeHTML(input.organizationId)})</span></td></tr>
<tr><th>Date</th><td>${day(invoice.createdAt)}</td></tr>
${invoice.paidAt !== null ? `<tr><th>Paid</th><td>${day(invoice.paidAt)}</td></tr>` : ""}
</table></div>
<div class="box"><table><tr><th>Description</th><th class="num">Amount</th></tr>
<tr><td>${escapeHTML(invoice.description)}${period}</td><td class="num">${total}</td></tr>
<tr><th>Total</th><th class="num">${total}</th></tr></table></div>
<p class="muted noprint">Print this page (or print to PDF) for your records. <a href="/billing/portal">Billing portal</a></p>`,
  );
}

export function portalPage(input: {
  organizationName: string;
  subscriptions: SubscriptionRecord[];
  invoices: InvoiceRecord[];
  returnUrl: string | null;
  language: Language;
}): string {
  const { language } = input;
  const returnQuery = input.returnUrl ? `?return=${encodeURIComponent(input.returnUrl)}` : "";
  const subscriptions =
    input.subscriptions.length === 0
      ? `<p class="muted">No subscription.</p>`
      : `<table><tr><th>Plan</th><th>Status</th><th>Current period</th><th class="num">Price</th><th></th></tr>${input.subscriptions
          .map((sub) => {
            const cancel =
              sub.status === "active"
                ? `<form method="post" action="/billing/portal/subscriptions/${escapeHTML(sub.id)}/cancel${escapeHTML(returnQuery)}"><button class="secondary" type="submit">Cancel</button></form>`
                : `<span class="muted">credits last until ${day(sub.currentPeriodEnd)}</span>`;
            return `<tr><td>${escapeHTML(sub.planName)}<br><span class="muted">${sub.creditsPerPeriod.toLocaleString("en-US")} credits per ${sub.interval}</span></td><td><span class="status ${sub.status}">${sub.status}</span></td><td>${day(sub.currentPeriodStart)} to ${day(sub.currentPeriodEnd)}</td><td class="num">${price(sub.amount, sub.currency, language)}</td><td>${cancel}</td></tr>`;
          })
          .join("")}</table>`;
  const invoices =
    input.invoices.length === 0
      ? `<p class="muted">No invoice yet.</p>`
      : `<table><tr><th>Number</th><th>Date</th><th>Status</th><th class="num">Total</th></tr>${input.invoices
          .map(
            (invoice) =>
              `<tr><td><a href="/billing/invoices/${escapeHTML(invoice.id)}">${escapeHTML(invoice.number)}</a></td><td>${day(invoice.createdAt)}</td><td>${escapeHTML(invoice.status)}</td><td class="num">${price(invoice.amount, invoice.currency, language)}</td></tr>`,
          )
          .join("")}</table>`;
  const back = input.returnUrl ? `<p><a href="${escapeHTML(input.returnUrl)}">← Back</a></p>` : "";
  return page(
    "Billing portal",
    `${back}<h1>Billing</h1><p class="muted">${escapeHTML(input.organizationName)}</p>
<h2>Subscriptions</h2><div class="box">${subscriptions}<p class="muted">A canceled subscription renews no more; the credits of its current period stay until the period ends.</p></div>
<h2>Invoices</h2><div class="box">${invoices}</div>`,
  );
}

export function returnPage(outcome: "success" | "canceled" | undefined): string {
  const text =
    outcome === "success"
      ? "Thank you: your payment is received. The credits appear in your balance within moments."
      : outcome === "canceled"
        ? "The checkout was canceled; nothing was charged."
        : "You can close this window.";
  return page("Billing", `<h1>Billing</h1><p>${text}</p>`);
}
