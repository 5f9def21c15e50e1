// Building blocks shared by the pages: a paged table, a confirmation dialog, copy to clipboard.
import type { Page } from "./api";
import { h, replace } from "./dom";
import { t } from "./i18n";

let idSequence = 0;
export function uniqueId(prefix: string): string {
  return `${prefix}-${++idSequence}`;
}

export interface PagedTable {
  element: HTMLElement;
  /** Loads the current page again (after a change). */
  reload(): Promise<void>;
}

/**
 * A table filled one API page at a time, with Previous and Next buttons. Cursors only go forward,
 * so the cursors of the pages seen so far are kept to go back.
 */
export function pagedTable<T>(options: {
  caption: string;
  /** Column headings; `{ label, numeric: true }` aligns a column of numbers to the right. */
  columns: Array<string | { label: string; numeric: true }>;
  load(cursor: string | null): Promise<Page<T>>;
  row(item: T, table: PagedTable): HTMLTableRowElement;
  empty: string;
  onError(error: unknown): void;
}): PagedTable {
  const cursors: Array<string | null> = [null];
  let index = 0;
  let nextCursor: string | null = null;
  const captionId = uniqueId("caption");
  const body = h("tbody");
  const table = h(
    "table",
    {},
    h("caption", { id: captionId }, options.caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        ...options.columns.map((column) =>
          typeof column === "string" ? h("th", { scope: "col" }, column) : h("th", { scope: "col", class: "num" }, column.label),
        ),
      ),
    ),
    body,
  );
  const previous = h("button", { type: "button", class: "secondary", disabled: true }, t("previous"));
  const next = h("button", { type: "button", class: "secondary", disabled: true }, t("next"));
  const position = h("span", { class: "muted" });
  const pager = h("div", { class: "pager" }, previous, position, next);
  // A scrollable region on narrow screens; focusable so it scrolls with the keyboard.
  const element = h("div", {}, h("div", { class: "table-wrap", role: "region", "aria-labelledby": captionId, tabindex: 0 }, table), pager);
  const handle: PagedTable = { element, reload: () => show() };

  async function show(): Promise<void> {
    body.setAttribute("aria-busy", "true");
    try {
      const page = await options.load(cursors[index] ?? null);
      nextCursor = page.nextCursor;
      if (page.items.length === 0) replace(body, h("tr", {}, h("td", { colspan: options.columns.length, class: "muted" }, options.empty)));
      else replace(body, ...page.items.map((item) => options.row(item, handle)));
      position.textContent = index > 0 || nextCursor !== null ? t("pageN", { n: index + 1 }) : "";
      previous.disabled = index === 0;
      next.disabled = nextCursor === null;
      pager.hidden = index === 0 && nextCursor === null;
    } catch (error) {
      options.onError(error);
    } finally {
      body.removeAttribute("aria-busy");
    }
  }

  previous.addEventListener("click", () => {
    if (index === 0) return;
    index--;
    void show();
  });
  next.addEventListener("click", () => {
    if (nextCursor === null) return;
    cursors[++index] = nextCursor;
    void show();
  });
  void show();
  return handle;
}

/** Asks before a destructive action, in a modal dialog (Escape or Cancel say no). Resolves true to go ahead. */
export function confirmAction(options: { title: string; text: string; confirm: string }): Promise<boolean> {
  const titleId = uniqueId("dialog-title");
  const textId = uniqueId("dialog-text");
  // method="dialog": the clicked button's value becomes returnValue, with no script per button.
  const dialog = h(
    "dialog",
    { class: "confirm", "aria-labelledby": titleId, "aria-describedby": textId },
    h(
      "form",
      { method: "dialog" },
      h("h2", { id: titleId }, options.title),
      h("p", { id: textId }, options.text),
      h(
        "div",
        { class: "actions" },
        h("button", { value: "cancel", class: "secondary", autofocus: true }, t("cancel")),
        h("button", { value: "confirm", class: "danger" }, options.confirm),
      ),
    ),
  );
  document.body.append(dialog);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "confirm");
      dialog.remove();
    });
    dialog.showModal();
  });
}

/** Copies `text`; falls back to selecting `field` and the legacy copy command where the Clipboard API is missing (plain http). */
export async function copyText(text: string, field: HTMLInputElement | HTMLElement | null): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (field instanceof HTMLInputElement) field.select();
    else if (field !== null) window.getSelection()?.selectAllChildren(field);
    return document.execCommand("copy");
  }
}

/**
 * The panel that shows a secret once (a new API key, a webhook signing secret), with Copy and Done;
 * Done empties `region` and calls `onDone`. `ids` names the field and its title and warning.
 */
export function secretPanel(options: {
  region: HTMLElement;
  announce: (message: string) => void;
  secret: string;
  ids: { field: string; title: string; warning: string };
  text: { title: string; warning: string; label: string };
  focus: boolean;
  onDone: () => void;
}): void {
  const { region, secret, ids, text } = options;
  const field = h("input", {
    id: ids.field,
    class: "secret",
    readonly: true,
    value: secret,
    spellcheck: "false",
    autocomplete: "off",
    "aria-describedby": ids.warning,
  });
  const copy = h("button", { type: "button" }, t("copy"));
  copy.addEventListener("click", async () => options.announce(t((await copyText(secret, field)) ? "copied" : "copyFailed")));
  const done = h("button", { type: "button", class: "secondary" }, t("secretDone"));
  done.addEventListener("click", () => {
    replace(region);
    options.onDone();
  });
  field.addEventListener("focus", () => field.select());
  replace(
    region,
    h(
      "section",
      { class: "panel secret-panel", "aria-labelledby": ids.title },
      h("h2", { id: ids.title }, text.title),
      h("p", { id: ids.warning, class: "warning" }, text.warning),
      h("label", { for: ids.field }, text.label),
      h("div", { class: "row" }, field, copy),
      h("div", {}, done),
    ),
  );
  if (options.focus) copy.focus();
}

/** A random Idempotency-Key; works outside secure contexts too, unlike crypto.randomUUID. */
export function newIdempotencyKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join("");
}
