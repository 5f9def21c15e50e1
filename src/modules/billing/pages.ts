// HTML pages of the local provider: checkout (with a Pay button in development mode), printable
// invoice, billing portal. No script and no external asset; every dynamic value is escaped.
import type { InvoiceRecord, Order, SubscriptionRecord } from "../../db/billing/records";
import type { InvoiceStatus, PlanInterval, SubscriptionStatus } from "../../db/billing/records";
import type { Language } from "../../http/i18n";
import { money } from "../../lib/money";
import type { Catalog } from "./catalog";
import { catalogName, ledgerText } from "./ledger-text";

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

/** Every text of the pages, in each language the API speaks. */
const TEXTS = {
  en: {
    locale: "en-US",
    credits: (n: string) => `${n} credits`,
    creditsPer: (n: string, interval: PlanInterval) => `${n} credits per ${interval}`,
    checkout: "Checkout",
    order: "order",
    total: "Total",
    paidOn: (day: string) =>
      `<span class="status paid">Paid</span> on ${day}. The credits are in your balance; the invoice is in the <a href="/billing/portal">billing portal</a>.`,
    pay: (total: string) => `Pay ${total}`,
    developmentPay: "Development mode: this button completes the order without taking any money.",
    awaitingPayment: "Awaiting payment",
    operatorCompletes: "An operator completes this order once payment is received:",
    cancelAndGoBack: "Cancel and go back",
    invoice: (number: string) => `Invoice ${number}`,
    invoiceStatus: { draft: "draft", open: "open", paid: "paid", void: "void" } satisfies Record<InvoiceStatus, string>,
    period: (start: string, end: string) => `Period ${start} to ${end}`,
    issuedBy: "Issued by",
    billedTo: "Billed to",
    date: "Date",
    paid: "Paid",
    description: "Description",
    amount: "Amount",
    printHint: "Print this page (or print to PDF) for your records.",
    billingPortal: "Billing portal",
    billing: "Billing",
    back: "← Back",
    subscriptions: "Subscriptions",
    noSubscription: "No subscription.",
    plan: "Plan",
    status: "Status",
    currentPeriod: "Current period",
    price: "Price",
    cancel: "Cancel",
    subscriptionStatus: { active: "active", canceled: "canceled" } satisfies Record<SubscriptionStatus, string>,
    creditsLastUntil: (day: string) => `credits last until ${day}`,
    between: (start: string, end: string) => `${start} to ${end}`,
    canceledNote: "A canceled subscription renews no more; the credits of its current period stay until the period ends.",
    invoices: "Invoices",
    noInvoice: "No invoice yet.",
    number: "Number",
    returnSuccess: "Thank you: your payment is received. The credits appear in your balance within moments.",
    returnCanceled: "The checkout was canceled; nothing was charged.",
    returnOther: "You can close this window.",
  },
  fr: {
    locale: "fr-FR",
    credits: (n: string) => `${n} crédits`,
    creditsPer: (n: string, interval: PlanInterval) => `${n} crédits par ${interval === "month" ? "mois" : "an"}`,
    checkout: "Paiement",
    order: "commande",
    total: "Total",
    paidOn: (day: string) =>
      `<span class="status paid">Payée</span> le ${day}. Les crédits sont sur votre solde ; la facture est dans le <a href="/billing/portal">portail de facturation</a>.`,
    pay: (total: string) => `Payer ${total}`,
    developmentPay: "Mode développement : ce bouton finalise la commande sans prélever d'argent.",
    awaitingPayment: "En attente de paiement",
    operatorCompletes: "Un opérateur finalise cette commande une fois le paiement reçu :",
    cancelAndGoBack: "Annuler et revenir",
    invoice: (number: string) => `Facture ${number}`,
    invoiceStatus: { draft: "brouillon", open: "à payer", paid: "payée", void: "annulée" } satisfies Record<InvoiceStatus, string>,
    period: (start: string, end: string) => `Période du ${start} au ${end}`,
    issuedBy: "Émise par",
    billedTo: "Facturée à",
    date: "Date",
    paid: "Payée le",
    description: "Désignation",
    amount: "Montant",
    printHint: "Imprimez cette page (ou enregistrez-la en PDF) pour vos archives.",
    billingPortal: "Portail de facturation",
    billing: "Facturation",
    back: "← Retour",
    subscriptions: "Abonnements",
    noSubscription: "Aucun abonnement.",
    plan: "Formule",
    status: "Statut",
    currentPeriod: "Période en cours",
    price: "Prix",
    cancel: "Résilier",
    subscriptionStatus: { active: "actif", canceled: "résilié" } satisfies Record<SubscriptionStatus, string>,
    creditsLastUntil: (day: string) => `crédits valables jusqu'au ${day}`,
    between: (start: string, end: string) => `du ${start} au ${end}`,
    canceledNote: "Un abonnement résilié ne se renouvelle plus ; les crédits de sa période en cours restent jusqu'à la fin de celle-ci.",
    invoices: "Factures",
    noInvoice: "Aucune facture pour l'instant.",
    number: "Numéro",
    returnSuccess: "Merci : votre paiement est reçu. Les crédits apparaissent sur votre solde dans quelques instants.",
    returnCanceled: "Le paiement a été annulé ; rien n'a été débité.",
    returnOther: "Vous pouvez fermer cette fenêtre.",
  },
} satisfies Record<Language, Record<string, unknown>>;

/** What every page is rendered for: the reader's language, and the catalog that names packs and plans in it. */
export interface PageContext {
  language: Language;
  catalog: Catalog;
}

function page(language: Language, title: string, body: string): string {
  return `<!doctype html><html lang="${language}"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>${escapeHTML(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

function price(amount: number, currency: string, language: Language): string {
  return escapeHTML(money(amount, currency, language).formatted);
}

function day(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

function count(credits: number, language: Language): string {
  return credits.toLocaleString(TEXTS[language].locale);
}

export function checkoutPage(input: { order: Order; organizationName: string; canPay: boolean } & PageContext): string {
  const { order, language } = input;
  const text = TEXTS[language];
  const name = catalogName(input.catalog, order.itemName, language);
  const what =
    order.kind === "pack" || order.interval === null
      ? text.credits(count(order.credits, language))
      : text.creditsPer(count(order.credits, language), order.interval);
  const total = price(order.amount, order.currency, language);
  let action: string;
  if (order.status === "completed") {
    action = `<p>${text.paidOn(day(order.completedAt ?? order.createdAt))}</p>`;
  } else if (input.canPay) {
    action = `<form method="post" action="/billing/checkout/${escapeHTML(order.id)}/pay"><button type="submit">${text.pay(total)}</button></form>
<p class="muted">${text.developmentPay}</p>`;
  } else {
    action = `<p><span class="status">${text.awaitingPayment}</span></p><p>${text.operatorCompletes} <code>price-service orders complete ${escapeHTML(order.id)}</code>.</p>`;
  }
  const cancel =
    order.status === "pending" && order.cancelUrl ? `<p class="noprint"><a href="${escapeHTML(order.cancelUrl)}">${text.cancelAndGoBack}</a></p>` : "";
  return page(
    language,
    `${text.checkout} ${name}`,
    `<h1>${text.checkout}</h1><p class="muted">${escapeHTML(input.organizationName)} · ${text.order} <code>${escapeHTML(order.id)}</code></p>
<div class="box"><table><tr><th>${escapeHTML(name)}</th><td>${escapeHTML(what)}</td><td class="num">${total}</td></tr>
<tr><th>${text.total}</th><td></td><td class="num"><strong>${total}</strong></td></tr></table></div>${action}${cancel}`,
  );
}

export function invoicePage(input: { invoice: InvoiceRecord; organizationName: string; organizationId: string; issuer: string } & PageContext): string {
  const { invoice, language } = input;
  const text = TEXTS[language];
  const total = price(invoice.amount, invoice.currency, language);
  const period =
    invoice.periodStart !== null && invoice.periodEnd !== null
      ? `<br><span class="muted">${text.period(day(invoice.periodStart), day(invoice.periodEnd))}</span>`
      : "";
  return page(
    language,
    text.invoice(invoice.number),
    `<h1>${escapeHTML(text.invoice(invoice.number))}</h1><p><span class="status ${escapeHTML(invoice.status)}">${text.invoiceStatus[invoice.status]}</span></p>
<div class="box"><table>
<tr><th>${text.issuedBy}</th><td>${escapeHTML(input.issuer)}</td></tr>
<tr><th>${text.billedTo}</th><td>${escapeHTML(input.organizationName)} <span class="muted">(${escapeHTML(input.organizationId)})</span></td></tr>
<tr><th>${text.date}</th><td>${day(invoice.createdAt)}</td></tr>
${invoice.paidAt !== null ? `<tr><th>${text.paid}</th><td>${day(invoice.paidAt)}</td></tr>` : ""}
</table></div>
<div class="box"><table><tr><th>${text.description}</th><th class="num">${text.amount}</th></tr>
<tr><td>${escapeHTML(ledgerText(invoice.description, language, input.catalog))}${period}</td><td class="num">${total}</td></tr>
<tr><th>${text.total}</th><th class="num">${total}</th></tr></table></div>
<p class="muted noprint">${text.printHint} <a href="/billing/portal">${text.billingPortal}</a></p>`,
  );
}

export function portalPage(
  input: { organizationName: string; subscriptions: SubscriptionRecord[]; invoices: InvoiceRecord[]; returnUrl: string | null } & PageContext,
): string {
  const { language } = input;
  const text = TEXTS[language];
  const returnQuery = input.returnUrl ? `?return=${encodeURIComponent(input.returnUrl)}` : "";
  const subscriptions =
    input.subscriptions.length === 0
      ? `<p class="muted">${text.noSubscription}</p>`
      : `<table><tr><th>${text.plan}</th><th>${text.status}</th><th>${text.currentPeriod}</th><th class="num">${text.price}</th><th></th></tr>${input.subscriptions
          .map((sub) => {
            const cancel =
              sub.status === "active"
                ? `<form method="post" action="/billing/portal/subscriptions/${escapeHTML(sub.id)}/cancel${escapeHTML(returnQuery)}"><button class="secondary" type="submit">${text.cancel}</button></form>`
                : `<span class="muted">${text.creditsLastUntil(day(sub.currentPeriodEnd))}</span>`;
            const name = catalogName(input.catalog, sub.planName, language);
            return `<tr><td>${escapeHTML(name)}<br><span class="muted">${text.creditsPer(count(sub.creditsPerPeriod, language), sub.interval)}</span></td><td><span class="status ${sub.status}">${text.subscriptionStatus[sub.status]}</span></td><td>${text.between(day(sub.currentPeriodStart), day(sub.currentPeriodEnd))}</td><td class="num">${price(sub.amount, sub.currency, language)}</td><td>${cancel}</td></tr>`;
          })
          .join("")}</table>`;
  const invoices =
    input.invoices.length === 0
      ? `<p class="muted">${text.noInvoice}</p>`
      : `<table><tr><th>${text.number}</th><th>${text.date}</th><th>${text.status}</th><th class="num">${text.total}</th></tr>${input.invoices
          .map(
            (invoice) =>
              `<tr><td><a href="/billing/invoices/${escapeHTML(invoice.id)}">${escapeHTML(invoice.number)}</a></td><td>${day(invoice.createdAt)}</td><td>${text.invoiceStatus[invoice.status]}</td><td class="num">${price(invoice.amount, invoice.currency, language)}</td></tr>`,
          )
          .join("")}</table>`;
  const back = input.returnUrl ? `<p><a href="${escapeHTML(input.returnUrl)}">${text.back}</a></p>` : "";
  return page(
    language,
    text.billingPortal,
    `${back}<h1>${text.billing}</h1><p class="muted">${escapeHTML(input.organizationName)}</p>
<h2>${text.subscriptions}</h2><div class="box">${subscriptions}<p class="muted">${text.canceledNote}</p></div>
<h2>${text.invoices}</h2><div class="box">${invoices}</div>`,
  );
}

export function returnPage(outcome: "success" | "canceled" | undefined, language: Language): string {
  const text = TEXTS[language];
  const message = outcome === "success" ? text.returnSuccess : outcome === "canceled" ? text.returnCanceled : text.returnOther;
  return page(language, text.billing, `<h1>${text.billing}</h1><p>${message}</p>`);
}
