import { call, type SessionUser } from "../api";
import type { PageContext } from "../context";
import { h } from "../dom";
import { type MessageKey, t } from "../i18n";

const SIGN_IN_ERRORS = new Set(["expired", "denied", "provider", "unauthorized", "forbidden", "conflict", "unavailable"]);

/** Only a dashboard page may follow a sign-in: anything else would be an open redirect. */
export function safeNext(next: string | null): string {
  return next !== null && /^\/dashboard(\/[a-z-]+)?$/.test(next) && next !== "/dashboard/sign-in" ? next : "/dashboard/keys";
}

export async function renderSignIn(context: PageContext, root: HTMLElement, url: URL): Promise<void> {
  const next = safeNext(url.searchParams.get("next"));
  const error = url.searchParams.get("error");
  context.heading(t("signInTitle"));
  root.append(h("p", {}, t("signInIntro")));
  if (error !== null && SIGN_IN_ERRORS.has(error)) context.fail(new Error(t(`signInError.${error}` as MessageKey)));
  if (url.searchParams.has("signed-out")) context.announce(t("signedOut"));

  if (context.signInMode === "oidc") {
    root.append(h("p", {}, h("a", { class: "button", href: `/api/v1/auth/oidc/start?next=${encodeURIComponent(next)}` }, t("signInOIDC"))));
  } else if (context.signInMode === "development") {
    const email = h("input", { id: "sign-in-email", type: "email", name: "email", required: true, autocomplete: "email", maxlength: 254 });
    const submit = h("button", { type: "submit" }, t("signInButton"));
    const form = h(
      "form",
      { class: "stack narrow" },
      h("p", { class: "note", id: "dev-note" }, t("signInDevNote")),
      h("label", { for: "sign-in-email" }, t("email")),
      email,
      h("div", {}, submit),
    );
    email.setAttribute("aria-describedby", "dev-note");
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      submit.disabled = true;
      try {
        const session = await call<{ user: SessionUser }>("POST", "/auth/dev-login", { body: { email: email.value } });
        context.user = session.user;
        context.navigate(next, { replace: true });
      } catch (failure) {
        context.fail(failure);
        submit.disabled = false;
        email.focus();
      }
    });
    root.append(form);
  } else {
    root.append(h("p", { class: "note" }, t("signInOff")));
  }
}
