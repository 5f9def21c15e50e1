import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, otherOrganization, postForm, postJSON } from "./fixtures";
import type { TestSession } from "./session-helper";
import { securityTests } from "../support/security";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

type Invoice = { id: string; number: string; total: { amount: number }; hostedUrl: string };

function invoices(query = "", headers: Record<string, string> = fx.session.headers): Promise<Response> {
  return fx.context.request(`${BILLING}/invoices${query}`, { headers });
}

async function buyPack(packId: string, session: TestSession = fx.session): Promise<void> {
  const { checkoutUrl } = await json(await postJSON(fx.context, `${BILLING}/checkout/pack`, { packId }, session.headers));
  expect((await postForm(fx.context, `${new URL(checkoutUrl).pathname}/pay`, session.headers)).status).toBe(303);
  fx.context.clock.advance(1000);
}

describe("GET /api/v1/customer/billing/invoices", () => {
  test("it lists paid local invoices newest first, numbered in sequence across organizations", async () => {
    await buyPack("pack-1k");
    const other = await otherOrganization(fx.context);
    await buyPack("pack-10k", other.session);
    await buyPack("pack-100k");
    const response = await invoices();
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body.nextCursor).toBeNull();
    expect(body.items.map((i: Invoice) => [i.number, i.total.amount])).toEqual([
      ["INV-000003", 60_000],
      ["INV-000001", 1000],
    ]);
    const theirs = await json(await invoices("", other.org.auth));
    expect(theirs.items.map((i: Invoice) => i.number)).toEqual(["INV-000002"]);
  });

  test("an API key of the organization lists the same invoices, money in the response language", async () => {
    await buyPack("pack-10k");
    const byKey = await invoices("?language=fr", fx.org.auth);
    expect(byKey.status).toBe(200);
    const body = await json(byKey);
    expect(body.items[0].total).toEqual({ amount: 8000, currency: "EUR", formatted: "80,00 €" });
    expect(body.items.map((i: Invoice) => i.id)).toEqual((await json(await invoices())).items.map((i: Invoice) => i.id));
  });

  test("pages follow nextCursor without overlap or gap", async () => {
    for (let i = 0; i < 5; i++) await buyPack("pack-1k");
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { items: Invoice[]; nextCursor: string | null } = await json(await invoices(`?limit=2${cursor ? `&cursor=${cursor}` : ""}`));
      expect(page.items.length).toBeLessThanOrEqual(2);
      seen.push(...page.items.map((i) => i.number));
      cursor = page.nextCursor;
    } while (cursor !== null);
    expect(seen).toEqual(["INV-000005", "INV-000004", "INV-000003", "INV-000002", "INV-000001"]);
  });

  test("a cursor that is not an invoice id is 400 invalid-parameter", async () => {
    const response = await invoices("?cursor=DROP%20TABLE");
    expect(response.status).toBe(400);
    expect((await json(response)).type).toEndWith("/problems/invalid-parameter");
  });

  test("the hosted invoice page is for the organization's members only: 404 for another organization, 401 without a session", async () => {
    await buyPack("pack-1k");
    const [invoice] = (await json(await invoices())).items as Invoice[];
    const path = new URL(invoice!.hostedUrl).pathname;
    expect((await fx.context.request(path, { headers: { cookie: fx.session.cookie } })).status).toBe(200);
    const other = await otherOrganization(fx.context);
    expect((await fx.context.request(path, { headers: { cookie: other.session.cookie } })).status).toBe(404);
    expect((await fx.context.request(path)).status).toBe(401);
    expect((await fx.context.request("/billing/invoices/inv_unknown", { headers: { cookie: fx.session.cookie } })).status).toBe(404);
  });

  securityTests({ method: "GET", path: () => `${BILLING}/invoices`, accepts: "sessionOrKey" }, () => fx.context);
});
