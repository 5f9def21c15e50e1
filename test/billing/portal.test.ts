import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, otherOrganization, postForm, postJSON } from "./fixtures";
import { securityTests } from "../support/security";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

function portal(body: unknown, headers: Record<string, string> = fx.session.headers): Promise<Response> {
  return body === undefined ? fx.context.request(`${BILLING}/portal`, { method: "POST", headers }) : postJSON(fx.context, `${BILLING}/portal`, body, headers);
}

async function buy(kind: "pack" | "subscription", id: string, session = fx.session): Promise<void> {
  const response = await postJSON(fx.context, `${BILLING}/checkout/${kind}`, kind === "pack" ? { packId: id } : { planId: id }, session.headers);
  const { checkoutUrl } = await json(response);
  await postForm(fx.context, `${new URL(checkoutUrl).pathname}/pay`, session.headers);
}

describe("POST /api/v1/customer/billing/portal", () => {
  test("with a session it answers 200 with the URL of the local portal, carrying the return URL", async () => {
    const response = await portal({ returnUrl: "https://app.example/settings?tab=billing" });
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({
      url: `http://localhost:8080/billing/portal?return=${encodeURIComponent("https://app.example/settings?tab=billing")}`,
    });
  });

  test("without a body, or with an empty one, the portal returns to the service's landing page", async () => {
    for (const body of [undefined, {}]) {
      const response = await portal(body);
      expect(response.status).toBe(200);
      expect((await json(response)).url).toBe(`http://localhost:8080/billing/portal?return=${encodeURIComponent("http://localhost:8080/billing/return")}`);
    }
  });

  test("a returnUrl that is not http(s) is refused as 422 unprocessable-body", async () => {
    const response = await portal({ returnUrl: "javascript:alert(document.cookie)" });
    expect(response.status).toBe(422);
    expect((await json(response)).type).toEndWith("/problems/unprocessable-body");
  });

  securityTests({ method: "POST", path: () => `${BILLING}/portal`, body: () => ({}), accepts: "session" }, () => fx.context);
});

describe("GET /billing/portal (local portal page)", () => {
  test("it lists the organization's subscriptions with a cancel button, its invoices and the back link", async () => {
    await buy("subscription", "pro-monthly");
    await buy("pack", "pack-1k");
    const { url } = await json(await portal({ returnUrl: "https://app.example/back" }));
    const page = await fx.context.request(new URL(url).pathname + new URL(url).search, { headers: { cookie: fx.session.cookie } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const html = await page.text();
    expect(html).toContain('<a href="https://app.example/back">');
    expect(html).toContain("Pro");
    expect(html).toContain("50,000 credits per month");
    expect(html).toMatch(/action="\/billing\/portal\/subscriptions\/sub_[a-z0-9]+\/cancel\?return=https%3A%2F%2Fapp\.example%2Fback"/);
    expect(html).toContain("INV-000001");
    expect(html).toContain("INV-000002");
  });

  test("another organization's portal shows none of this organization's subscriptions or invoices", async () => {
    await buy("subscription", "pro-monthly");
    const other = await otherOrganization(fx.context);
    const html = await (await fx.context.request("/billing/portal", { headers: { cookie: other.session.cookie } })).text();
    expect(html).toContain("No subscription.");
    expect(html).toContain("No invoice yet.");
    expect(html).toContain("Other Org");
  });

  test("a return parameter that is not http(s) is 400, never rendered as a link", async () => {
    const response = await fx.context.request(`/billing/portal?return=${encodeURIComponent("javascript:alert(1)")}`, {
      headers: { cookie: fx.session.cookie },
    });
    expect(response.status).toBe(400);
  });

  test("it needs a session: no cookie or an API key is 401", async () => {
    expect((await fx.context.request("/billing/portal")).status).toBe(401);
    expect((await fx.context.request("/billing/portal", { headers: fx.org.auth })).status).toBe(401);
  });
});
