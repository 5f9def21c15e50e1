import { type APIKey, call, type CreatedKey, type Page, withQuery } from "../api";
import type { PageContext } from "../context";
import { h, replace, srOnly } from "../dom";
import { formatDateTime, type MessageKey, t } from "../i18n";
import { confirmAction, newIdempotencyKey, type PagedTable, pagedTable, secretPanel, uniqueId } from "../widgets";

/**
 * The one clear secret the dashboard holds: in memory only, until the user dismisses it or the page
 * is reloaded. Never stored, never put in a URL.
 */
let shownSecret: { name: string; clearKey: string } | null = null;

function showSecret(context: PageContext, region: HTMLElement, focus: boolean): void {
  if (shownSecret === null) {
    replace(region);
    return;
  }
  secretPanel({
    region,
    announce: (message) => context.announce(message),
    secret: shownSecret.clearKey,
    ids: { field: "secret-key", title: "secret-title", warning: "secret-warning" },
    text: { title: t("secretTitle", { name: shownSecret.name }), warning: t("secretWarning"), label: t("secretLabel") },
    focus,
    onDone: () => {
      shownSecret = null;
      document.getElementById("key-name")?.focus();
    },
  });
}

/** What the key's controls are, one line each: its spending against its monthly limit, its expiry, its rate limit. */
function controlsCell(key: APIKey): HTMLTableCellElement {
  const lines: string[] = [
    key.monthlyCreditLimit === null
      ? t("spentNoLimit", { spent: key.creditsSpentThisMonth })
      : t("spentOfLimit", { spent: key.creditsSpentThisMonth, limit: key.monthlyCreditLimit }),
  ];
  if (key.expiresAt !== null) lines.push(t(Date.parse(key.expiresAt) <= Date.now() ? "expiredOn" : "expiresOn", { date: formatDateTime(key.expiresAt) }));
  if (key.rateLimit !== null) lines.push(t("perSecond", { n: key.rateLimit }));
  return h("td", { class: "controls" }, ...lines.flatMap((line, index) => (index === 0 ? [line] : [h("br"), line])));
}

/** `datetime-local` speaks local time without a zone; the API speaks UTC instants. */
function localInputValue(iso: string): string {
  const date = new Date(iso);
  const pad = (n: number) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/**
 * The inputs of a key's three controls (filled from `key` when editing it), and the values they
 * hold: an empty field is null (no control of its own).
 */
function controlFields(key: APIKey | null) {
  const field = (id: string, label: string, input: HTMLInputElement) => h("div", { class: "stack" }, h("label", { for: id }, label), input);
  const expiresId = uniqueId("expires");
  const limitId = uniqueId("limit");
  const rateId = uniqueId("rate");
  const expires = h("input", { id: expiresId, type: "datetime-local", value: key?.expiresAt == null ? "" : localInputValue(key.expiresAt) });
  const limit = h("input", {
    id: limitId,
    type: "number",
    min: 0,
    step: 1,
    inputmode: "numeric",
    value: key?.monthlyCreditLimit == null ? "" : String(key.monthlyCreditLimit),
  });
  const rate = h("input", { id: rateId, type: "number", min: 1, step: 1, inputmode: "numeric", value: key?.rateLimit == null ? "" : String(key.rateLimit) });
  return {
    elements: [field(expiresId, t("fieldExpiresAt"), expires), field(limitId, t("fieldMonthlyLimit"), limit), field(rateId, t("fieldRateLimit"), rate)],
    values: () => ({
      expiresAt: expires.value === "" ? null : new Date(expires.value).toISOString(),
      monthlyCreditLimit: limit.value === "" ? null : Number(limit.value),
      rateLimit: rate.value === "" ? null : Number(rate.value),
    }),
  };
}

/**
 * A dialog to edit the key's controls; resolves with the PATCH body (empty fields clear a control),
 * or null when cancelled.
 */
function editControls(key: APIKey): Promise<Record<string, string | number | null> | null> {
  const titleId = uniqueId("dialog-title");
  const controls = controlFields(key);
  const dialog = h(
    "dialog",
    { class: "confirm", "aria-labelledby": titleId },
    h(
      "form",
      { method: "dialog", class: "stack" },
      h("h2", { id: titleId }, t("controlsTitle", { name: key.name })),
      h("p", { class: "muted hint" }, t("controlsHint")),
      ...controls.elements,
      h(
        "div",
        { class: "actions" },
        h("button", { value: "cancel", class: "secondary", formnovalidate: true }, t("cancel")),
        h("button", { value: "save" }, t("save")),
      ),
    ),
  );
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      const saved = dialog.returnValue === "save";
      dialog.remove();
      resolve(saved ? controls.values() : null);
    });
    dialog.showModal();
  });
}

function keyRow(context: PageContext, key: APIKey, table: PagedTable, region: HTMLElement): HTMLTableRowElement {
  const actions = h("td", { class: "actions" });
  if (key.status === "ACTIVE") {
    const rotate = h("button", { type: "button", class: "secondary small" }, t("rotate"), srOnly(` ${key.name} (${key.keyPrefix})`));
    const revoke = h("button", { type: "button", class: "danger small" }, t("revoke"), srOnly(` ${key.name} (${key.keyPrefix})`));
    rotate.addEventListener("click", async () => {
      if (!(await confirmAction({ title: t("rotateTitle", { name: key.name }), text: t("rotateText", { prefix: key.keyPrefix }), confirm: t("rotate") })))
        return;
      try {
        const rotated = await call<CreatedKey>("POST", `/customer/api-keys/${encodeURIComponent(key.id)}/rotate`);
        shownSecret = { name: rotated.key.name, clearKey: rotated.clearKey };
        await table.reload();
        showSecret(context, region, true);
      } catch (error) {
        context.fail(error);
        await table.reload(); // the key may have changed elsewhere (409): show what it is now
      }
    });
    revoke.addEventListener("click", async () => {
      if (!(await confirmAction({ title: t("revokeTitle", { name: key.name }), text: t("revokeText", { prefix: key.keyPrefix }), confirm: t("revoke") })))
        return;
      try {
        await call<APIKey>("POST", `/customer/api-keys/${encodeURIComponent(key.id)}/revoke`);
        context.announce(t("revoked", { name: key.name }));
        await table.reload();
      } catch (error) {
        context.fail(error);
        await table.reload();
      }
    });
    const edit = h("button", { type: "button", class: "secondary small" }, t("editControls"), srOnly(` ${key.name} (${key.keyPrefix})`));
    edit.addEventListener("click", async () => {
      const body = await editControls(key);
      if (body === null) return;
      try {
        await call<APIKey>("PATCH", `/customer/api-keys/${encodeURIComponent(key.id)}`, { body });
        context.announce(t("controlsSaved", { name: key.name }));
      } catch (error) {
        context.fail(error);
      }
      await table.reload();
    });
    actions.append(edit, " ", rotate, " ", revoke);
  }
  return h(
    "tr",
    { "data-key-id": key.id },
    h("th", { scope: "row" }, key.name),
    h("td", {}, h("span", { class: `badge ${key.status.toLowerCase()}` }, t(`status.${key.status}` as MessageKey))),
    h("td", {}, h("code", {}, `${key.keyPrefix}…`)),
    h("td", {}, key.createdBy.name),
    h("td", {}, formatDateTime(key.createdAt)),
    h("td", {}, key.lastUsedAt === null ? t("never") : formatDateTime(key.lastUsedAt)),
    controlsCell(key),
    actions,
  );
}

export async function renderKeys(context: PageContext, root: HTMLElement): Promise<void> {
  context.heading(t("keysTitle"));
  // Always in the page, so screen readers announce the secret when it is put inside.
  const secretRegion = h("div", { "aria-live": "polite" });
  // The pattern refuses a name of spaces only, which the API would trim to nothing.
  const name = h("input", {
    id: "key-name",
    name: "name",
    required: true,
    maxlength: 100,
    pattern: ".*\\S.*",
    autocomplete: "off",
    "aria-describedby": "key-name-hint",
  });
  const submit = h("button", { type: "submit" }, t("createButton"));
  const createControls = controlFields(null);
  const form = h(
    "form",
    { class: "panel stack", "aria-labelledby": "create-title" },
    h("h2", { id: "create-title" }, t("createTitle")),
    h("label", { for: "key-name" }, t("keyName")),
    h("p", { id: "key-name-hint", class: "muted hint" }, t("keyNameHint")),
    h("div", { class: "row" }, name, submit),
    h("details", { class: "stack" }, h("summary", {}, t("createLimits")), h("p", { class: "muted hint" }, t("controlsHint")), ...createControls.elements),
  );
  const table = pagedTable<APIKey>({
    caption: t("keysCaption", { organization: context.user?.organization.name ?? "" }),
    columns: [t("colName"), t("colStatus"), t("colPrefix"), t("colCreatedBy"), t("colCreated"), t("colLastUsed"), t("colControls"), t("colActions")],
    load: (cursor) => call<Page<APIKey>>("GET", withQuery("/customer/api-keys", { limit: 20, cursor })),
    row: (key, handle) => keyRow(context, key, handle, secretRegion),
    empty: t("noKeys"),
    onError: (error) => context.fail(error),
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    try {
      // One key per submit, even if the request is retried.
      const created = await call<CreatedKey>("POST", "/customer/api-keys", {
        body: { name: name.value, ...createControls.values() },
        idempotencyKey: newIdempotencyKey(),
      });
      shownSecret = { name: created.key.name, clearKey: created.clearKey };
      form.reset();
      await table.reload();
      showSecret(context, secretRegion, true);
    } catch (error) {
      context.fail(error);
    } finally {
      submit.disabled = false;
    }
  });

  root.append(h("p", {}, t("keysIntro")), secretRegion, form, table.element);
  showSecret(context, secretRegion, false);
}
