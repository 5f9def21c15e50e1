import { type APIKey, call, type CreatedKey, type Page, withQuery } from "../api";
import type { PageContext } from "../context";
import { h, replace, srOnly } from "../dom";
import { formatDateTime, type MessageKey, t } from "../i18n";
import { confirmAction, copyText, newIdempotencyKey, type PagedTable, pagedTable } from "../widgets";

/**
 * The one clear secret the dashboard holds: in memory only, until the user dismisses it or the page
 * is reloaded. Never stored, never put in a URL.
 */
let shownSecret: { name: string; clearKey: string } | null = null;

function secretPanel(context: PageContext, region: HTMLElement, focus: boolean): void {
  if (shownSecret === null) {
    replace(region);
    return;
  }
  const { name, clearKey } = shownSecret;
  const field = h("input", { id: "secret-key", class: "secret", readonly: true, value: clearKey, spellcheck: "false", autocomplete: "off", "aria-describedby": "secret-warning" });
  const copy = h("button", { type: "button" }, t("copy"));
  copy.addEventListener("click", async () => context.announce(t((await copyText(clearKey, field)) ? "copied" : "copyFailed")));
  const done = h("button", { type: "button", class: "secondary" }, t("secretDone"));
  done.addEventListener("click", () => {
    shownSecret = null;
    replace(region);
    document.getElementById("key-name")?.focus();
  });
  field.addEventListener("focus", () => field.select());
  replace(
    region,
    h(
      "section",
      { class: "panel secret-panel", "aria-labelledby": "secret-title" },
      h("h2", { id: "secret-title" }, t("secretTitle", { name })),
      h("p", { id: "secret-warning", class: "warning" }, t("secretWarning")),
      h("label", { for: "secret-key" }, t("secretLabel")),
      h("div", { class: "row" }, field, copy),
      h("div", {}, done),
    ),
  );
  if (focus) copy.focus();
}

function keyRow(context: PageContext, key: APIKey, table: PagedTable, region: HTMLElement): HTMLTableRowElement {
  const actions = h("td", { class: "actions" });
  if (key.status === "ACTIVE") {
    const rotate = h("button", { type: "button", class: "secondary small" }, t("rotate"), srOnly(` ${key.name} (${key.keyPrefix})`));
    const revoke = h("button", { type: "button", class: "danger small" }, t("revoke"), srOnly(` ${key.name} (${key.keyPrefix})`));
    rotate.addEventListener("click", async () => {
      if (!(await confirmAction({ title: t("rotateTitle", { name: key.name }), text: t("rotateText", { prefix: key.keyPrefix }), confirm: t("rotate") }))) return;
      try {
        const rotated = await call<CreatedKey>("POST", `/customer/api-keys/${encodeURIComponent(key.id)}/rotate`);
        shownSecret = { name: rotated.key.name, clearKey: rotated.clearKey };
        await table.reload();
        secretPanel(context, region, true);
      } catch (error) {
        context.fail(error);
        await table.reload(); // the key may have changed elsewhere (409): show what it is now
      }
    });
    revoke.addEventListener("click", async () => {
      if (!(await confirmAction({ title: t("revokeTitle", { name: key.name }), text: t("revokeText", { prefix: key.keyPrefix }), confirm: t("revoke") }))) return;
      try {
        await call<APIKey>("POST", `/customer/api-keys/${encodeURIComponent(key.id)}/revoke`);
        context.announce(t("revoked", { name: key.name }));
        await table.reload();
      } catch (error) {
        context.fail(error);
        await table.reload();
      }
    });
    actions.append(rotate, " ", revoke);
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
    actions,
  );
}

export async function renderKeys(context: PageContext, root: HTMLElement): Promise<void> {
  context.heading(t("keysTitle"));
  // Always in the page, so screen readers announce the secret when it is put inside.
  const secretRegion = h("div", { "aria-live": "polite" });
  // The pattern refuses a name of spaces only, which the API would trim to nothing.
  const name = h("input", { id: "key-name", name: "name", required: true, maxlength: 100, pattern: ".*\\S.*", autocomplete: "off", "aria-describedby": "key-name-hint" });
  const submit = h("button", { type: "submit" }, t("createButton"));
  const form = h(
    "form",
    { class: "panel stack", "aria-labelledby": "create-title" },
    h("h2", { id: "create-title" }, t("createTitle")),
    h("label", { for: "key-name" }, t("keyName")),
    h("p", { id: "key-name-hint", class: "muted hint" }, t("keyNameHint")),
    h("div", { class: "row" }, name, submit),
  );
  const table = pagedTable<APIKey>({
    caption: t("keysCaption", { organization: context.user?.organization.name ?? "" }),
    columns: [t("colName"), t("colStatus"), t("colPrefix"), t("colCreatedBy"), t("colCreated"), t("colLastUsed"), t("colActions")],
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
      const created = await call<CreatedKey>("POST", "/customer/api-keys", { body: { name: name.value }, idempotencyKey: newIdempotencyKey() });
      shownSecret = { name: created.key.name, clearKey: created.clearKey };
      form.reset();
      await table.reload();
      secretPanel(context, secretRegion, true);
    } catch (error) {
      context.fail(error);
    } finally {
      submit.disabled = false;
    }
  });

  root.append(h("p", {}, t("keysIntro")), secretRegion, form, table.element);
  secretPanel(context, secretRegion, false);
}
