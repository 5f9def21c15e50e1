// The customer dashboard: a small single-page app over the public API. Served by the binary under
// /dashboard (see ../index.ts); built into ../assets.generated.ts by scripts/build-dashboard.ts.
import { APIError, call, type SessionUser } from "./api";
import type { PageContext, SignInMode } from "./context";
import { h, replace } from "./dom";
import { initialLanguage, LANGUAGE_NAMES, type Language, language, type MessageKey, setLanguage, t } from "./i18n";
import { renderBilling } from "./pages/billing";
import { renderKeys } from "./pages/keys";
import { renderProducts } from "./pages/products";
import { renderQuickstart } from "./pages/quickstart";
import { renderSignIn } from "./pages/sign-in";
import { renderWebhooks } from "./pages/webhooks";
import { renderWatches } from "./pages/watches";

type Render = (context: PageContext, root: HTMLElement, url: URL) => Promise<void>;

const PAGES: Record<string, { render: Render; nav?: MessageKey; public?: true }> = {
  "/dashboard/sign-in": { render: renderSignIn, public: true },
  "/dashboard/keys": { render: renderKeys, nav: "navKeys" },
  "/dashboard/billing": { render: renderBilling, nav: "navBilling" },
  "/dashboard/webhooks": { render: renderWebhooks, nav: "navWebhooks" },
  "/dashboard/products": { render: renderProducts, nav: "navProducts" },
  "/dashboard/watches": { render: renderWatches, nav: "navWatches" },
  "/dashboard/quickstart": { render: renderQuickstart, nav: "navQuickstart" },
};

const signInMode = (document.querySelector('meta[name="sign-in"]')?.getAttribute("content") ?? "off") as SignInMode;
const header = h("header", { class: "top" });
const alert = h("div", { class: "alert", role: "alert" });
const status = h("div", { class: "status", role: "status" });
const main = h("main", { id: "main", tabindex: -1 });
const skip = h("a", { class: "skip", href: "#main" });

const context: PageContext = {
  user: null,
  signInMode,
  navigate(path, options = {}) {
    history[options.replace ? "replaceState" : "pushState"](null, "", path);
    void show({ focus: true });
  },
  announce(message) {
    // Emptied first, so the same message twice is read twice.
    status.textContent = "";
    setTimeout(() => (status.textContent = message), 50);
  },
  fail(error) {
    if (error instanceof APIError && error.status === 401 && location.pathname !== "/dashboard/sign-in") {
      context.user = null;
      context.navigate(`/dashboard/sign-in?next=${encodeURIComponent(location.pathname)}`, { replace: true });
      return;
    }
    if (error instanceof APIError) {
      const problem = error.problem;
      replace(
        alert,
        h("p", {}, problem === null ? t("networkError") : problem.detail),
        problem?.requestId ? h("p", { class: "muted" }, t("requestId", { id: problem.requestId })) : null,
      );
    } else {
      replace(alert, h("p", {}, error instanceof Error ? error.message : String(error)));
    }
    alert.scrollIntoView({ block: "nearest" });
  },
  heading(text) {
    document.title = `${text} · price-service`;
    const heading = h("h1", { tabindex: -1 }, text);
    main.firstElementChild?.prepend(heading);
    return heading;
  },
};

function renderHeader(active: string): void {
  const choose = h(
    "select",
    { id: "language", "aria-label": t("language") },
    ...(Object.keys(LANGUAGE_NAMES) as Language[]).map((code) => h("option", { value: code, lang: code, selected: code === language() }, LANGUAGE_NAMES[code])),
  );
  choose.addEventListener("change", () => {
    setLanguage(choose.value as Language, { remember: true });
    void show({ focus: false }).then(() => document.getElementById("language")?.focus());
  });
  const user = context.user;
  let account: Node | null = null;
  if (user !== null) {
    const signOut = h("button", { type: "button", class: "secondary small" }, t("signOut"));
    signOut.addEventListener("click", async () => {
      try {
        await call("POST", "/auth/logout");
      } catch (error) {
        if (!(error instanceof APIError && error.status === 401)) return context.fail(error);
      }
      // A full load, so nothing of this session (a secret on screen) stays in memory.
      location.assign("/dashboard/sign-in?signed-out=1");
    });
    account = h(
      "div",
      { class: "account" },
      h("span", { class: "muted" }, t("signedInAs", { name: user.name, organization: user.organization.name })),
      signOut,
    );
  }
  const links = Object.entries(PAGES).filter(([, page]) => page.nav !== undefined && user !== null);
  replace(
    header,
    h("a", { class: "brand", href: user === null ? "/dashboard/sign-in" : "/dashboard/keys" }, "price-service"),
    links.length === 0
      ? null
      : h(
          "nav",
          { "aria-label": t("navLabel") },
          h("ul", {}, ...links.map(([path, page]) => h("li", {}, h("a", { href: path, "aria-current": path === active ? "page" : null }, t(page.nav!))))),
        ),
    h("div", { class: "tools" }, choose, account),
  );
  skip.textContent = t("skip");
}

/** Renders the page of the current URL (after checking the session for the pages that need one). */
async function show(options: { focus: boolean }): Promise<void> {
  const url = new URL(location.href);
  if (url.pathname === "/dashboard" || url.pathname === "/dashboard/") {
    history.replaceState(null, "", "/dashboard/keys");
    url.pathname = "/dashboard/keys";
  }
  const page = PAGES[url.pathname];
  if (page !== undefined && !page.public && context.user === null) {
    try {
      context.user = await call<SessionUser>("GET", "/auth/me");
    } catch (error) {
      if (error instanceof APIError && error.status === 401) {
        history.replaceState(null, "", `/dashboard/sign-in?next=${encodeURIComponent(url.pathname)}`);
        return show(options);
      }
      context.fail(error);
      return;
    }
  }
  shownPath = url.pathname + url.search;
  replace(alert);
  renderHeader(url.pathname);
  const root = h("div", { class: "page" });
  replace(main, root);
  if (page === undefined) {
    context.heading(t("notFound"));
  } else {
    const rendering = page.render(context, root, url).catch((error: unknown) => context.fail(error));
    if (options.focus) root.querySelector("h1")?.focus();
    await rendering;
  }
}

// Links inside the dashboard change the page without a reload; others (docs, checkout) load normally.
document.addEventListener("click", (event) => {
  const link = (event.target as Element).closest?.("a");
  if (
    link === null ||
    link === undefined ||
    link.getAttribute("href")?.startsWith("#") ||
    event.defaultPrevented ||
    event.button !== 0 ||
    event.metaKey ||
    event.ctrlKey ||
    event.shiftKey ||
    event.altKey
  )
    return;
  const target = new URL(link.href, location.href);
  if (target.origin !== location.origin || PAGES[target.pathname] === undefined || link.target !== "") return;
  event.preventDefault();
  context.navigate(target.pathname + target.search);
});
// Back and forward between pages; a jump to an anchor (the skip link) is not a page change.
let shownPath = "";
window.addEventListener("popstate", () => {
  if (location.pathname + location.search !== shownPath) void show({ focus: true });
});

setLanguage(initialLanguage(), { remember: false });
document.body.replaceChildren(skip, header, h("div", { class: "messages" }, alert, status), main);
void show({ focus: false });
