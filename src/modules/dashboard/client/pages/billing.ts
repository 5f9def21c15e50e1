import { type Balance, call, type Catalog, type Invoice, type Page, type Transaction, type UsageReport, withQuery } from "../api";
import { usageChart } from "../chart";
import type { PageContext } from "../context";
import { h, replace, srOnly } from "../dom";
import { formatDate, formatDateTime, formatNumber, language, type MessageKey, t } from "../i18n";
import { usageFromReport, windowStart } from "../usage";
import { newIdempotencyKey, pagedTable } from "../widgets";

const USAGE_DAYS = 30;

function section(id: string, title: string, ...children: Array<Node | null>): HTMLElement {
  return h("section", { class: "panel", "aria-labelledby": id }, h("h2", { id }, title), ...children);
}

function loading(): HTMLParagraphElement {
  return h("p", { class: "muted" }, t("loading"));
}

async function showBalance(body: HTMLElement): Promise<void> {
  const balance = await call<Balance>("GET", "/customer/billing/balance");
  const buckets =
    balance.buckets.length === 0
      ? h("p", { class: "muted" }, t("noBuckets"))
      : h(
          "div",
          { class: "table-wrap", role: "region", "aria-labelledby": "buckets-caption", tabindex: 0 },
          h(
            "table",
            {},
            h("caption", { id: "buckets-caption" }, t("bucketsCaption")),
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                h("th", { scope: "col" }, t("colSource")),
                h("th", { scope: "col", class: "num" }, t("colRemaining")),
                h("th", { scope: "col", class: "num" }, t("colGranted")),
                h("th", { scope: "col" }, t("colExpires")),
                h("th", { scope: "col" }, t("colAdded")),
              ),
            ),
            h(
              "tbody",
              {},
              ...balance.buckets.map((bucket) =>
                h(
                  "tr",
                  {},
                  h("th", { scope: "row" }, t(`source.${bucket.source}` as MessageKey)),
                  h("td", { class: "num" }, formatNumber(bucket.remaining)),
                  h("td", { class: "num" }, formatNumber(bucket.granted)),
                  h("td", {}, bucket.expiresAt === null ? t("never") : formatDate(bucket.expiresAt)),
                  h("td", {}, formatDate(bucket.createdAt)),
                ),
              ),
            ),
          ),
        );
  replace(
    body,
    h("p", { class: "balance" }, h("strong", { id: "available" }, formatNumber(balance.available)), " ", t("creditsAvailable")),
    balance.reserved > 0 ? h("p", { class: "muted" }, t("reserved", { n: formatNumber(balance.reserved) })) : null,
    buckets,
  );
}

async function showUsage(body: HTMLElement): Promise<void> {
  const report = await call<UsageReport>(
    "GET",
    withQuery("/customer/billing/usage", { granularity: "day", from: windowStart(new Date(), USAGE_DAYS).toISOString() }),
  );
  const days = usageFromReport(report.periods);
  const total = report.totals.creditsConsumed;
  const busiest = days.reduce((best, entry) => (entry.credits > best.credits ? entry : best), days[0]!);
  // The report's days are UTC days: their dates are shown as such, in the reader's language.
  const formatDay = (day: Date) => new Intl.DateTimeFormat(language(), { dateStyle: "medium", timeZone: "UTC" }).format(day);
  const summary =
    total === 0 ? t("usageNone") : t("usageSummary", { total: formatNumber(total), day: formatDay(busiest.day), peak: formatNumber(busiest.credits) });
  const dayLabel = new Intl.DateTimeFormat(language(), { day: "numeric", month: "short", timeZone: "UTC" });
  const chart = usageChart(days, {
    summary,
    label: (entry) => t("usageBar", { day: formatDay(entry.day), n: formatNumber(entry.credits) }),
    axisDay: (day) => dayLabel.format(day),
    axisNumber: (value) => formatNumber(value),
  });
  const table = h(
    "details",
    {},
    h("summary", {}, t("usageAsTable")),
    h(
      "table",
      {},
      h("caption", {}, t("usageCaption")),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, t("colDay")),
          h("th", { scope: "col", class: "num" }, t("colRequests")),
          h("th", { scope: "col", class: "num" }, t("colCredits")),
        ),
      ),
      h(
        "tbody",
        {},
        ...days.map((entry) =>
          h(
            "tr",
            {},
            h("th", { scope: "row" }, formatDay(entry.day)),
            h("td", { class: "num" }, formatNumber(entry.requests)),
            h("td", { class: "num" }, formatNumber(entry.credits)),
          ),
        ),
      ),
    ),
  );
  replace(body, h("p", { id: "usage-summary" }, summary), chart, table);
}

/** Sends the browser to the payment provider; it comes back to this page with ?checkout=success or canceled. */
async function checkout(context: PageContext, button: HTMLButtonElement, kind: "pack" | "subscription", id: string): Promise<void> {
  button.disabled = true;
  const back = (outcome: string) => `${location.origin}/dashboard/billing?checkout=${outcome}`;
  try {
    const body = { ...(kind === "pack" ? { packId: id } : { planId: id }), successUrl: back("success"), cancelUrl: back("canceled") };
    const started = await call<{ checkoutUrl: string }>("POST", `/customer/billing/checkout/${kind}`, { body, idempotencyKey: newIdempotencyKey() });
    location.assign(started.checkoutUrl);
  } catch (error) {
    button.disabled = false;
    context.fail(error);
  }
}

async function showOffers(context: PageContext, packs: HTMLElement, plans: HTMLElement): Promise<void> {
  const catalog = await call<Catalog>("GET", "/customer/billing/catalog");
  replace(
    packs,
    h(
      "ul",
      { class: "cards" },
      ...catalog.packs.map((pack) => {
        const buy = h("button", { type: "button" }, t("buy"), srOnly(` ${pack.name}`));
        buy.addEventListener("click", () => checkout(context, buy, "pack", pack.id));
        return h(
          "li",
          { class: "card" },
          h("h3", {}, pack.name),
          h("p", { class: "price" }, pack.price.formatted),
          h(
            "p",
            { class: "muted" },
            t("packCredits", { n: formatNumber(pack.credits) }),
            ", ",
            pack.validityDays === null ? t("neverExpire") : t("validFor", { n: pack.validityDays }),
          ),
          buy,
        );
      }),
    ),
  );
  const portal = h("button", { type: "button", class: "secondary" }, t("openPortal"));
  portal.addEventListener("click", async () => {
    portal.disabled = true;
    try {
      const opened = await call<{ url: string }>("POST", "/customer/billing/portal", { body: { returnUrl: `${location.origin}/dashboard/billing` } });
      location.assign(opened.url);
    } catch (error) {
      portal.disabled = false;
      context.fail(error);
    }
  });
  replace(
    plans,
    h(
      "ul",
      { class: "cards" },
      ...catalog.plans.map((plan) => {
        const subscribe = h("button", { type: "button" }, t("subscribe"), srOnly(` ${plan.name}`));
        subscribe.addEventListener("click", () => checkout(context, subscribe, "subscription", plan.id));
        return h(
          "li",
          { class: "card" },
          h("h3", {}, plan.name),
          h("p", { class: "price" }, plan.price.formatted),
          h("p", { class: "muted" }, t(plan.interval === "month" ? "perMonth" : "perYear", { n: formatNumber(plan.creditsPerPeriod) })),
          subscribe,
        );
      }),
    ),
    h("p", {}, t("portalText")),
    portal,
  );
}

export async function renderBilling(context: PageContext, root: HTMLElement, url: URL): Promise<void> {
  context.heading(t("billingTitle"));
  const outcome = url.searchParams.get("checkout");
  if (outcome === "success") context.announce(t("checkoutSuccess"));
  if (outcome === "canceled") context.announce(t("checkoutCanceled"));
  if (outcome !== null) history.replaceState(null, "", "/dashboard/billing");

  const balance = h("div", { id: "balance" }, loading());
  const usage = h("div", { id: "usage" }, loading());
  const packs = h("div", {}, loading());
  const plans = h("div", {}, loading());
  const money = (amount: number) => (amount > 0 ? `+${formatNumber(amount)}` : formatNumber(amount));
  const transactions = pagedTable<Transaction>({
    caption: t("transactionsCaption"),
    columns: [t("colDate"), t("colType"), { label: t("colAmount"), numeric: true }, { label: t("colBalanceAfter"), numeric: true }, t("colDescription")],
    load: (cursor) => call<Page<Transaction>>("GET", withQuery("/customer/billing/transactions", { limit: 20, cursor })),
    row: (transaction) =>
      h(
        "tr",
        {},
        h("td", {}, formatDateTime(transaction.createdAt)),
        h("td", {}, t(`type.${transaction.type}` as MessageKey)),
        h("td", { class: `num ${transaction.amount < 0 ? "out" : "in"}` }, money(transaction.amount)),
        h("td", { class: "num" }, formatNumber(transaction.balanceAfter)),
        h("td", {}, transaction.description),
      ),
    empty: t("noTransactions"),
    onError: (error) => context.fail(error),
  });
  const invoices = pagedTable<Invoice>({
    caption: t("invoicesCaption"),
    columns: [t("colNumber"), t("colDate"), t("colStatus"), { label: t("colTotal"), numeric: true }, t("colDocuments")],
    load: (cursor) => call<Page<Invoice>>("GET", withQuery("/customer/billing/invoices", { limit: 20, cursor })),
    row: (invoice) => {
      const number = invoice.number ?? invoice.id;
      return h(
        "tr",
        {},
        h("th", { scope: "row" }, number),
        h("td", {}, formatDate(invoice.createdAt)),
        h("td", {}, h("span", { class: `badge ${invoice.status}` }, t(`invoice.${invoice.status}` as MessageKey))),
        h("td", { class: "num" }, invoice.total.formatted),
        h(
          "td",
          {},
          invoice.hostedUrl === null ? null : h("a", { href: invoice.hostedUrl }, t("viewInvoice", { number })),
          invoice.hostedUrl !== null && invoice.pdfUrl !== null ? " · " : null,
          invoice.pdfUrl === null ? null : h("a", { href: invoice.pdfUrl }, t("invoicePDF", { number })),
        ),
      );
    },
    empty: t("noInvoices"),
    onError: (error) => context.fail(error),
  });

  root.append(
    section("balance-title", t("balanceTitle"), balance),
    section("usage-title", t("usageTitle"), usage),
    section("buy-title", t("buyTitle"), packs),
    section("subscribe-title", t("subscribeTitle"), plans),
    section("transactions-title", t("transactionsTitle"), transactions.element),
    section("invoices-title", t("invoicesTitle"), invoices.element),
  );
  const report = (error: unknown) => context.fail(error);
  await Promise.all([showBalance(balance).catch(report), showUsage(usage).catch(report), showOffers(context, packs, plans).catch(report)]);
}
