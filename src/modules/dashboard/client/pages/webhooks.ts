import { call, type EndpointWithSecret, type Page, type WebhookDelivery, type WebhookEndpoint, withQuery } from "../api";
import type { PageContext } from "../context";
import { h, replace, srOnly } from "../dom";
import { formatDateTime, type MessageKey, t } from "../i18n";
import { confirmAction, pagedTable, type PagedTable, secretPanel, uniqueId } from "../widgets";

const EVENT_TYPES = ["credits.low", "credits.depleted", "credits.granted", "key.created", "key.rotated", "key.revoked", "invoice.created", "price.changed"];

/** The one signing secret the page holds, in memory only, until dismissed or the page is reloaded. */
let shownSecret: { url: string; secret: string } | null = null;

function showSecret(context: PageContext, region: HTMLElement, focus: boolean): void {
  if (shownSecret === null) {
    replace(region);
    return;
  }
  secretPanel({
    region,
    announce: (message) => context.announce(message),
    secret: shownSecret.secret,
    ids: { field: "hook-secret", title: "hook-secret-title", warning: "hook-secret-warning" },
    text: { title: t("hookSecretTitle", { url: shownSecret.url }), warning: t("hookSecretWarning"), label: t("hookSecretLabel") },
    focus,
    onDone: () => {
      shownSecret = null;
      document.getElementById("hook-url")?.focus();
    },
  });
}

function thresholdForm(context: PageContext): HTMLFormElement {
  const input = h("input", { id: "threshold", type: "number", min: 1, step: 1, inputmode: "numeric", "aria-describedby": "threshold-hint" });
  const submit = h("button", { type: "submit" }, t("save"));
  const form = h(
    "form",
    { class: "panel stack", "aria-labelledby": "threshold-title" },
    h("h2", { id: "threshold-title" }, t("thresholdTitle")),
    h("label", { for: "threshold" }, t("thresholdLabel")),
    h("p", { id: "threshold-hint", class: "muted hint" }, t("thresholdHint")),
    h("div", { class: "row" }, input, submit),
  );
  call<{ lowCreditThreshold: number | null }>("GET", "/customer/webhooks/settings").then(
    (settings) => (input.value = settings.lowCreditThreshold === null ? "" : String(settings.lowCreditThreshold)),
    (error: unknown) => context.fail(error),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      await call("PATCH", "/customer/webhooks/settings", { body: { lowCreditThreshold: input.value === "" ? null : Number(input.value) } });
      context.announce(t("thresholdSaved"));
    } catch (error) {
      context.fail(error);
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function deliveryLog(context: PageContext, endpoint: WebhookEndpoint): HTMLElement {
  const table = pagedTable<WebhookDelivery>({
    caption: t("logCaption", { url: endpoint.url }),
    columns: [t("colEvent"), t("colState"), { label: t("colAttempts"), numeric: true }, t("colLastStatus"), t("colNextTry")],
    load: (cursor) => call<Page<WebhookDelivery>>("GET", withQuery(`/customer/webhooks/${encodeURIComponent(endpoint.id)}/deliveries`, { limit: 20, cursor })),
    row: (delivery) =>
      h(
        "tr",
        {},
        h("th", { scope: "row" }, delivery.eventType, h("br"), h("code", { class: "muted" }, delivery.eventId)),
        h("td", {}, h("span", { class: `badge ${delivery.state}` }, t(`delivery.${delivery.state}` as MessageKey))),
        h("td", { class: "num" }, delivery.attempts),
        h("td", { title: delivery.lastResponse ?? "" }, delivery.lastStatus === null ? (delivery.lastResponse ?? "–") : String(delivery.lastStatus)),
        h("td", {}, delivery.nextAttemptAt === null ? "–" : formatDateTime(delivery.nextAttemptAt)),
      ),
    empty: t("noDeliveries"),
    onError: (error) => context.fail(error),
  });
  return h("section", { class: "panel", "aria-label": t("logCaption", { url: endpoint.url }) }, table.element);
}

function endpointRow(
  context: PageContext,
  endpoint: WebhookEndpoint,
  table: PagedTable,
  secretRegion: HTMLElement,
  logRegion: HTMLElement,
): HTMLTableRowElement {
  const label = srOnly(` ${endpoint.url}`);
  const test = h("button", { type: "button", class: "secondary small", disabled: endpoint.status === "disabled" }, t("hookTest"), label.cloneNode(true));
  const log = h("button", { type: "button", class: "secondary small" }, t("hookLog"), label.cloneNode(true));
  const rotate = h("button", { type: "button", class: "secondary small" }, t("hookRotate"), label.cloneNode(true));
  const remove = h("button", { type: "button", class: "danger small" }, t("hookDelete"), label);
  const enable = endpoint.status === "disabled" ? h("button", { type: "button", class: "small" }, t("hookEnable"), label.cloneNode(true)) : null;
  enable?.addEventListener("click", async () => {
    try {
      await call("POST", `/customer/webhooks/${encodeURIComponent(endpoint.id)}/enable`);
      context.announce(t("hookEnabled", { url: endpoint.url }));
    } catch (error) {
      context.fail(error);
    }
    await table.reload();
  });
  test.addEventListener("click", async () => {
    try {
      await call("POST", `/customer/webhooks/${encodeURIComponent(endpoint.id)}/test`);
      context.announce(t("hookTestSent", { url: endpoint.url }));
      replace(logRegion, deliveryLog(context, endpoint));
    } catch (error) {
      context.fail(error);
    }
  });
  log.addEventListener("click", () => replace(logRegion, deliveryLog(context, endpoint)));
  rotate.addEventListener("click", async () => {
    if (!(await confirmAction({ title: t("hookRotateTitle", { url: endpoint.url }), text: t("hookRotateText"), confirm: t("hookRotate") }))) return;
    try {
      const rotated = await call<EndpointWithSecret>("POST", `/customer/webhooks/${encodeURIComponent(endpoint.id)}/rotate-secret`);
      shownSecret = { url: rotated.endpoint.url, secret: rotated.secret };
      showSecret(context, secretRegion, true);
    } catch (error) {
      context.fail(error);
    }
  });
  remove.addEventListener("click", async () => {
    if (!(await confirmAction({ title: t("hookDeleteTitle", { url: endpoint.url }), text: t("hookDeleteText"), confirm: t("hookDelete") }))) return;
    try {
      await call("DELETE", `/customer/webhooks/${encodeURIComponent(endpoint.id)}`);
      context.announce(t("hookDeleted", { url: endpoint.url }));
      replace(logRegion);
    } catch (error) {
      context.fail(error);
    }
    await table.reload();
  });
  return h(
    "tr",
    { "data-endpoint-id": endpoint.id },
    h("th", { scope: "row" }, h("code", {}, endpoint.url)),
    h("td", {}, endpoint.eventTypes.join(", ")),
    h("td", {}, h("span", { class: `badge ${endpoint.status}` }, t(`hook.${endpoint.status}` as MessageKey))),
    h("td", {}, formatDateTime(endpoint.createdAt)),
    h("td", { class: "actions" }, enable, enable && " ", test, " ", log, " ", rotate, " ", remove),
  );
}

export async function renderWebhooks(context: PageContext, root: HTMLElement): Promise<void> {
  context.heading(t("hooksTitle"));
  const secretRegion = h("div", { "aria-live": "polite" });
  const logRegion = h("div");
  const url = h("input", {
    id: "hook-url",
    type: "url",
    required: true,
    maxlength: 2000,
    placeholder: "https://",
    autocomplete: "off",
    "aria-describedby": "hook-url-hint",
  });
  const boxes = EVENT_TYPES.map((type) => {
    const id = uniqueId("event");
    return { type, box: h("input", { id, type: "checkbox", value: type, checked: type.startsWith("credits.") }), id };
  });
  const submit = h("button", { type: "submit" }, t("hookCreate"));
  const form = h(
    "form",
    { class: "panel stack", "aria-labelledby": "hook-create-title" },
    h("h2", { id: "hook-create-title" }, t("hookCreateTitle")),
    h("label", { for: "hook-url" }, t("hookURL")),
    h("p", { id: "hook-url-hint", class: "muted hint" }, t("hookURLHint")),
    url,
    h(
      "fieldset",
      {},
      h("legend", {}, t("hookEvents")),
      ...boxes.map(({ box, id, type }) => h("div", {}, box, " ", h("label", { for: id }, h("code", {}, type)))),
    ),
    h("div", {}, submit),
  );
  const table = pagedTable<WebhookEndpoint>({
    caption: t("hooksCaption", { organization: context.user?.organization.name ?? "" }),
    columns: [t("colURL"), t("colEvents"), t("colStatus"), t("colCreated"), t("colActions")],
    load: (cursor) => call<Page<WebhookEndpoint>>("GET", withQuery("/customer/webhooks", { limit: 20, cursor })),
    row: (endpoint, handle) => endpointRow(context, endpoint, handle, secretRegion, logRegion),
    empty: t("noHooks"),
    onError: (error) => context.fail(error),
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      const eventTypes = boxes.filter(({ box }) => box.checked).map(({ type }) => type);
      const created = await call<EndpointWithSecret>("POST", "/customer/webhooks", { body: { url: url.value, eventTypes } });
      shownSecret = { url: created.endpoint.url, secret: created.secret };
      form.reset();
      await table.reload();
      showSecret(context, secretRegion, true);
    } catch (error) {
      context.fail(error);
    } finally {
      submit.disabled = false;
    }
  });
  root.append(h("p", {}, t("hooksIntro")), thresholdForm(context), secretRegion, form, table.element, logRegion);
  showSecret(context, secretRegion, false);
}
