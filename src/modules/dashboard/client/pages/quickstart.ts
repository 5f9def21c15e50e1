import { type APIKey, call, type Page, withQuery } from "../api";
import type { PageContext } from "../context";
import { h, replace } from "../dom";
import { language, t } from "../i18n";
import { copyText, uniqueId } from "../widgets";

/** A product of the demo data (development mode), so the first call returns a billed fresh offer there. */
export const EXAMPLE_GTIN = "4006381333931";
const VARIABLE = "PRICE_SERVICE_KEY";

/**
 * The shell commands of the quickstart for one key: reading the secret into a variable (it is shown
 * only once, so the command asks for it rather than showing a placeholder), a price look-up, the balance.
 */
export function quickstartCommands(_key: Pick<APIKey, "name" | "keyPrefix">, origin: string, lang: string, comment: string): [string, string, string] {
  return [
    `# ${comment}\nread -rs ${VARIABLE} && export ${VARIABLE}`,
    `curl -sS "${origin}/api/v1/products/${EXAMPLE_GTIN}/price?language=${lang}" \\\n  -H "Authorization: Bearer $${VARIABLE}"`,
    `curl -sS "${origin}/api/v1/customer/billing/balance" \\\n  -H "Authorization: Bearer $${VARIABLE}"`,
  ];
}

function codeBlock(context: PageContext, step: string, command: string): HTMLElement {
  const stepId = uniqueId("step");
  const code = h("code", {}, command);
  const copy = h("button", { type: "button", class: "secondary small", "aria-describedby": stepId }, t("copy"));
  copy.addEventListener("click", async () => context.announce(t((await copyText(command, code)) ? "copied" : "copyFailed")));
  return h("li", {}, h("p", { id: stepId }, step), h("div", { class: "code" }, h("pre", {}, code), copy));
}

export async function renderQuickstart(context: PageContext, root: HTMLElement): Promise<void> {
  context.heading(t("quickTitle"));
  root.append(h("p", {}, t("quickIntro")));
  const page = await call<Page<APIKey>>("GET", withQuery("/customer/api-keys", { limit: 100 }));
  const active = page.items.filter((key) => key.status === "ACTIVE");
  if (active.length === 0) {
    root.append(h("p", {}, t("quickNoKey"), " ", h("a", { href: "/dashboard/keys" }, t("quickCreate"))));
    return;
  }
  const steps = h("ol", { class: "steps", id: "quickstart-steps" });
  const show = (key: APIKey) => {
    const [variable, price, balance] = quickstartCommands(key, location.origin, language(), t("quickComment", { name: key.name, prefix: key.keyPrefix }));
    replace(steps, codeBlock(context, t("quickStep1"), variable), codeBlock(context, t("quickStep2"), price), codeBlock(context, t("quickStep3"), balance));
  };
  const select = h("select", { id: "quickstart-key" }, ...active.map((key, index) => h("option", { value: String(index) }, `${key.name} (${key.keyPrefix}…)`)));
  select.addEventListener("change", () => show(active[Number(select.value)]!));
  root.append(h("div", { class: "stack narrow" }, h("label", { for: "quickstart-key" }, t("quickKey")), select), steps);
  root.append(h("p", {}, t("quickDocs"), " ", h("a", { href: "/docs" }, t("apiReference")), "."));
  show(active[0]!);
}
