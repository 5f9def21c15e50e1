import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, postForm, postJSON } from "./fixtures";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

async function checkout(kind: "pack" | "subscription", id: string): Promise<string> {
  const response = await postJSON(fx.context, `${BILLING}/checkout/${kind}`, kind === "pack" ? { packId: id } : { planId: id }, fx.session.headers);
  return new URL((await json(response)).checkoutUrl).pathname;
}

async function page(path: string, language: "en" | "fr"): Promise<{ response: Response; words: Set<string>; html: string }> {
  const response = await fx.context.request(path, { headers: { cookie: fx.session.cookie, "accept-language": language } });
  const html = await response.text();
  const text = html
    .replace(/<style>[\s\S]*?<\/style>/g, " ")
    .replace(/<code>[\s\S]*?<\/code>/g, " ")
    .replace(/<[^>]+>/g, " ");
  // Words only: ids, numbers and amounts are tokens with digits, underscores or hyphens.
  const words = text.split(/[\s.,;:!?()«»"·←]+/u).filter((token) => /^\p{L}+(['’]\p{L}+)*$/u.test(token));
  return { response, html, words: new Set(words) };
}

// Words the same in both languages, or not language at all (names, the command an operator types).
const SAME_IN_BOTH = new Set(["Total", "Date", "Pro", "Basic", "Org", "Test", "page", "PDF", "localhost"]);

/** Every word of the English page that is still on the French one, apart from names and words both languages share. */
function englishLeftIn(french: Set<string>, english: Set<string>): string[] {
  return [...english].filter((word) => french.has(word) && !SAME_IN_BOTH.has(word));
}

describe("the local provider's pages in French", () => {
  test("checkout, invoice, portal and return pages have no English text left, say lang=fr and Content-Language: fr", async () => {
    const pendingPlan = await checkout("subscription", "pro-yearly");
    const pendingPack = await checkout("pack", "pack-1k");
    const paidPack = await checkout("pack", "pack-10k");
    await postForm(fx.context, `${paidPack}/pay`, fx.session.headers);
    const subscribed = await checkout("subscription", "pro-monthly");
    await postForm(fx.context, `${subscribed}/pay`, fx.session.headers);
    const [subscription] = await fx.context.services.store.listSubscriptions(fx.org.organizationId);
    await postForm(fx.context, `/billing/portal/subscriptions/${subscription!.id}/cancel`, fx.session.headers);
    const invoices = (await json(await fx.context.request(`${BILLING}/invoices`, { headers: fx.session.headers }))).items;
    expect(invoices.length).toBe(2);

    const paths = [
      pendingPlan,
      pendingPack,
      paidPack,
      ...invoices.map((invoice: { id: string }) => `/billing/invoices/${invoice.id}`),
      `/billing/portal?return=${encodeURIComponent("https://app.example/back")}`,
      "/billing/return?checkout=success",
      "/billing/return?checkout=canceled",
      "/billing/return",
    ];
    for (const path of paths) {
      const french = await page(path, "fr");
      const english = await page(path, "en");
      expect(french.response.status).toBe(200);
      expect(french.response.headers.get("content-language")).toBe("fr");
      expect(english.response.headers.get("content-language")).toBe("en");
      expect(french.html).toStartWith('<!doctype html><html lang="fr">');
      expect({ path, english: englishLeftIn(french.words, english.words) }).toEqual({ path, english: [] });
    }
  });

  test("the pack and plan names, credits and statuses are the French ones", async () => {
    const pack = await checkout("pack", "pack-1k");
    expect((await page(pack, "fr")).html).toContain("<th>1\u202f000 crédits</th><td>1\u202f000 crédits</td>");
    await postForm(fx.context, `${pack}/pay`, fx.session.headers);
    const plan = await checkout("subscription", "pro-yearly");
    await postForm(fx.context, `${plan}/pay`, fx.session.headers);
    const portal = (await page("/billing/portal", "fr")).html;
    expect(portal).toContain("Pro, annuel<br>");
    expect(portal).toContain("600\u202f000 crédits par an");
    expect(portal).toContain('<span class="status active">actif</span>');
    const [invoice] = (await json(await fx.context.request(`${BILLING}/invoices`, { headers: fx.session.headers }))).items;
    expect((await page(`/billing/invoices/${invoice.id}`, "fr")).html).toContain("Pro, annuel (600\u202f000 crédits par an)");
  });

  test("ledger rows of a purchase name the pack in French", async () => {
    const pack = await checkout("pack", "pack-1k");
    await postForm(fx.context, `${pack}/pay`, fx.session.headers);
    const response = await fx.context.request(`${BILLING}/transactions?type=purchase`, { headers: { ...fx.session.headers, "accept-language": "fr" } });
    expect(response.headers.get("content-language")).toBe("fr");
    expect((await json(response)).items.map((row: { description: string }) => row.description)).toEqual(["Pack « 1\u202f000 crédits » : 1\u202f000 crédits"]);
  });
});
