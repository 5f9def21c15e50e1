import { call, type Page, withQuery } from "../api";
import type { PageContext } from "../context";
import { h, srOnly } from "../dom";
import { formatDateTime, type MessageKey, t } from "../i18n";
import { confirmAction, pagedTable, type PagedTable } from "../widgets";

interface PriceWatch {
  id: string;
  gtin: string;
  merchant: string | null;
  trigger: "any-change" | "price-drop" | "below";
  below: { amount: number; currency: string } | null;
  status: "active" | "paused";
  pausedReason: "insufficient-credits" | null;
  createdAt: string;
  lastTriggeredAt: string | null;
}

/** A threshold in minor units as the currency shows it. */
function threshold(below: { amount: number; currency: string }): string {
  const digits = new Intl.NumberFormat("en", { style: "currency", currency: below.currency }).resolvedOptions().maximumFractionDigits ?? 2;
  return new Intl.NumberFormat(document.documentElement.lang || "en", { style: "currency", currency: below.currency }).format(below.amount / 10 ** digits);
}

function triggerText(watch: PriceWatch): string {
  if (watch.trigger === "below" && watch.below !== null) return t("trigger.below", { price: threshold(watch.below) });
  return t(`trigger.${watch.trigger}` as MessageKey);
}

function watchRow(context: PageContext, watch: PriceWatch, table: PagedTable): HTMLTableRowElement {
  const remove = h("button", { type: "button", class: "danger small" }, t("watchDelete"), srOnly(` ${watch.gtin}`));
  remove.addEventListener("click", async () => {
    if (!(await confirmAction({ title: t("watchDeleteTitle", { gtin: watch.gtin }), text: t("watchDeleteText"), confirm: t("watchDelete") }))) return;
    try {
      await call("DELETE", `/customer/watches/${encodeURIComponent(watch.id)}`);
      context.announce(t("watchDeleted", { gtin: watch.gtin }));
    } catch (error) {
      context.fail(error);
    }
    await table.reload();
  });
  const status = h("span", { class: `badge ${watch.status === "active" ? "enabled" : "disabled"}` }, t(`watch.${watch.status}` as MessageKey));
  const reason = watch.pausedReason === null ? null : h("p", { class: "muted hint" }, t(`pausedReason.${watch.pausedReason}` as MessageKey));
  return h(
    "tr",
    { "data-watch-id": watch.id },
    h(
      "th",
      { scope: "row" },
      h("code", {}, watch.gtin),
      h("br"),
      h("span", { class: "muted" }, watch.merchant === null ? t("watchAllMerchants") : t("watchMerchant", { merchant: watch.merchant })),
    ),
    h("td", {}, triggerText(watch)),
    h("td", {}, status, reason),
    h("td", {}, watch.lastTriggeredAt === null ? t("never") : formatDateTime(watch.lastTriggeredAt)),
    h("td", {}, formatDateTime(watch.createdAt)),
    h("td", { class: "actions" }, remove),
  );
}

export async function renderWatches(context: PageContext, root: HTMLElement): Promise<void> {
  context.heading(t("watchesTitle"));
  const table = pagedTable<PriceWatch>({
    caption: t("watchesCaption", { organization: context.user?.organization.name ?? "" }),
    columns: [t("colProduct"), t("colTrigger"), t("colStatus"), t("colLastTriggered"), t("colCreated"), t("colActions")],
    load: (cursor) => call<Page<PriceWatch>>("GET", withQuery("/customer/watches", { limit: 20, cursor })),
    row: (watch, paged) => watchRow(context, watch, paged),
    empty: t("noWatches"),
    onError: (error) => context.fail(error),
  });
  root.append(h("p", {}, t("watchesIntro")), table.element);
}
