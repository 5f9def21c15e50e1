import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, DAY, otherOrganization, postForm, postJSON } from "./fixtures";
import { securityTests } from "../support/security";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

async function checkout(kind: "pack" | "subscription", body: Record<string, unknown>, headers: Record<string, string> = fx.session.headers) {
  return postJSON(fx.context, `${BILLING}/checkout/${kind}`, body, headers);
}

async function startPack(packId = "pack-1k", extra: Record<string, unknown> = {}): Promise<{ checkoutId: string; checkoutUrl: string; path: string }> {
  const response = await checkout("pack", { packId, ...extra });
  expect(response.status).toBe(201);
  const body = await json(response);
  return { ...body, path: new URL(body.checkoutUrl).pathname };
}

async function balance() {
  return json(await fx.context.request(`${BILLING}/balance`, { headers: fx.org.auth }));
}

async function invoices() {
  return json(await fx.context.request(`${BILLING}/invoices`, { headers: fx.org.auth }));
}

describe("POST /api/v1/customer/billing/checkout/pack", () => {
  test("with a session it answers 201 with the checkout id and the service's own checkout page, granting nothing yet", async () => {
    const response = await checkout("pack", { packId: "pack-10k" });
    expect(response.status).toBe(201);
    const body = await json(response);
    expect(Object.keys(body).sort()).toEqual(["checkoutId", "checkoutUrl"]);
    expect(body.checkoutId).toMatch(/^ord_[a-z0-9]+$/);
    expect(body.checkoutUrl).toBe(`http://localhost:8080/billing/checkout/${body.checkoutId}`);
    const order = await fx.context.store.getOrder(body.checkoutId);
    expect(order).toMatchObject({
      organizationId: fx.org.organizationId,
      userId: fx.session.userId,
      kind: "pack",
      itemId: "pack-10k",
      credits: 10_000,
      amount: 8000,
      currency: "EUR",
      status: "pending",
      provider: "local",
    });
    expect((await balance()).available).toBe(0);
  });

  test("an unknown pack is 400 invalid-body", async () => {
    const response = await checkout("pack", { packId: "pack-free" });
    expect(response.status).toBe(400);
    const problem = await json(response);
    expect(problem.type).toEndWith("/problems/invalid-body");
    expect(problem.detail).toContain("pack-free");
    expect((await fx.context.store.listOrders({ limit: 10 })).items).toHaveLength(0);
  });

  test("a body without packId, or with a successUrl that is not http(s), is refused as 422 unprocessable-body", async () => {
    for (const body of [{}, { packId: "pack-1k", successUrl: "javascript:alert(1)" }]) {
      const response = await checkout("pack", body);
      expect(response.status).toBe(422);
      expect((await json(response)).type).toEndWith("/problems/unprocessable-body");
    }
  });

  test("a body that is not JSON is 415 unsupported-media-type", async () => {
    const response = await fx.context.request(`${BILLING}/checkout/pack`, {
      method: "POST",
      headers: { ...fx.session.headers, "content-type": "text/plain", "content-length": "14" },
      body: "packId=pack-1k",
    });
    expect(response.status).toBe(415);
  });

  securityTests({ method: "POST", path: () => `${BILLING}/checkout/pack`, body: () => ({ packId: "pack-1k" }), accepts: "session" }, () => fx.context);
});

describe("POST /api/v1/customer/billing/checkout/subscription", () => {
  test("with a session it answers 201 with a checkout for the plan", async () => {
    const response = await checkout("subscription", {
      planId: "pro-yearly",
      successUrl: "https://app.example/thanks",
      cancelUrl: "https://app.example/pricing",
    });
    expect(response.status).toBe(201);
    const body = await json(response);
    expect(body.checkoutUrl).toBe(`http://localhost:8080/billing/checkout/${body.checkoutId}`);
    expect(await fx.context.store.getOrder(body.checkoutId)).toMatchObject({
      kind: "subscription",
      itemId: "pro-yearly",
      credits: 600_000,
      interval: "year",
      amount: 199_000,
      successUrl: "https://app.example/thanks",
      cancelUrl: "https://app.example/pricing",
    });
  });

  test("an unknown plan is 400 invalid-body", async () => {
    const response = await checkout("subscription", { planId: "enterprise" });
    expect(response.status).toBe(400);
    expect((await json(response)).type).toEndWith("/problems/invalid-body");
  });

  test("a pack id is not a plan id", async () => {
    expect((await checkout("subscription", { planId: "pack-1k" })).status).toBe(400);
  });

  securityTests(
    { method: "POST", path: () => `${BILLING}/checkout/subscription`, body: () => ({ planId: "basic-monthly" }), accepts: "session" },
    () => fx.context,
  );
});

describe("local checkout in a browser", () => {
  test("checkout page, Pay, then the balance, the ledger and the invoices show the purchase", async () => {
    const { checkoutId, path } = await startPack("pack-1k", { successUrl: "https://app.example/thanks?x=1" });

    const page = await fx.context.request(path, { headers: { cookie: fx.session.cookie } });
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("content-security-policy")).toStartWith("default-src 'none'");
    const html = await page.text();
    expect(html).toContain("1,000 credits");
    expect(html).toContain(`<form method="post" action="/billing/checkout/${checkoutId}/pay">`);
    expect(html).toContain("Pay €10.00");
    expect(html).not.toMatch(/<script|https?:\/\/(?!localhost)[^"]*\.(js|css)/);

    const paid = await postForm(fx.context, `${path}/pay`, fx.session.headers);
    expect(paid.status).toBe(303);
    expect(paid.headers.get("location")).toBe("https://app.example/thanks?x=1");

    const after = await balance();
    expect(after.available).toBe(1000);
    expect(after.buckets).toEqual([expect.objectContaining({ source: "pack", granted: 1000, remaining: 1000, expiresAt: null })]);
    const ledger = await json(await fx.context.request(`${BILLING}/transactions`, { headers: fx.org.auth }));
    expect(ledger.items).toEqual([
      expect.objectContaining({
        type: "purchase",
        amount: 1000,
        balanceAfter: 1000,
        bucketId: after.buckets[0].id,
        description: 'Pack "1,000 credits": 1,000 credits',
      }),
    ]);
    const list = await invoices();
    expect(list.items).toEqual([
      {
        id: expect.stringMatching(/^inv_/),
        number: "INV-000001",
        status: "paid",
        total: { amount: 1000, currency: "EUR", formatted: "€10.00" },
        createdAt: "2026-11-22T10:00:00.000Z",
        hostedUrl: `http://localhost:8080/billing/invoices/${list.items[0].id}`,
        pdfUrl: null,
      },
    ]);

    const invoicePage = await fx.context.request(new URL(list.items[0].hostedUrl).pathname, { headers: { cookie: fx.session.cookie } });
    expect(invoicePage.status).toBe(200);
    const invoiceHTML = await invoicePage.text();
    expect(invoiceHTML).toContain("Invoice INV-000001");
    expect(invoiceHTML).toContain("€10.00");
    expect(invoiceHTML).toContain("Test Org");

    const pageAfter = await (await fx.context.request(path, { headers: { cookie: fx.session.cookie } })).text();
    expect(pageAfter).toContain("Paid");
    expect(pageAfter).not.toContain("<form");
  });

  test("without a successUrl, Pay leads back to the checkout page, which then shows it paid", async () => {
    const { path } = await startPack();
    const paid = await postForm(fx.context, `${path}/pay`, fx.session.headers);
    expect(paid.headers.get("location")).toBe(`http://localhost:8080${path}`);
  });

  test("paying twice grants the credits and writes the invoice once", async () => {
    const { path } = await startPack("pack-10k");
    const [first, second] = await Promise.all([
      postForm(fx.context, `${path}/pay`, fx.session.headers),
      postForm(fx.context, `${path}/pay`, fx.session.headers),
    ]);
    expect([first.status, second.status]).toEqual([303, 303]);
    expect((await postForm(fx.context, `${path}/pay`, fx.session.headers)).status).toBe(303);
    expect((await balance()).available).toBe(10_000);
    expect((await invoices()).items).toHaveLength(1);
    expect((await json(await fx.context.request(`${BILLING}/transactions?type=purchase`, { headers: fx.org.auth }))).items).toHaveLength(1);
  });

  test("a pack with validityDays grants credits that expire after those days", async () => {
    const dir = mkdtempSync(join(tmpdir(), "catalog-"));
    writeFileSync(
      join(dir, "c.json"),
      JSON.stringify({ packs: [{ id: "month-pack", name: "Month", credits: 300, price: { amount: 500, currency: "EUR" }, validityDays: 30 }], plans: [] }),
    );
    await fx.context.close();
    fx = await billingFixture({ env: { CATALOG_FILE: join(dir, "c.json") } });
    rmSync(dir, { recursive: true }); // the catalog is read once, at start-up
    const { path } = await startPack("month-pack");
    await postForm(fx.context, `${path}/pay`, fx.session.headers);
    expect((await balance()).buckets[0].expiresAt).toBe(new Date(fx.context.clock.now() + 30 * DAY).toISOString());
  });

  test("the cancel link leads to the order's cancelUrl while it is pending", async () => {
    const { path } = await startPack("pack-1k", { cancelUrl: "https://app.example/pricing?a=1&b=2" });
    const html = await (await fx.context.request(path, { headers: { cookie: fx.session.cookie } })).text();
    expect(html).toContain('href="https://app.example/pricing?a=1&#38;b=2"');
  });

  test("another organization's owner can neither see nor pay the checkout: 404, nothing granted", async () => {
    const { path } = await startPack();
    const other = await otherOrganization(fx.context);
    expect((await fx.context.request(path, { headers: { cookie: other.session.cookie } })).status).toBe(404);
    const pay = await postForm(fx.context, `${path}/pay`, other.session.headers);
    expect(pay.status).toBe(404);
    expect((await balance()).available).toBe(0);
    expect((await fx.context.store.getBalance(other.org.organizationId, fx.context.clock.now())).available).toBe(0);
  });

  test("an unknown checkout id is 404", async () => {
    expect((await fx.context.request("/billing/checkout/ord_unknown", { headers: { cookie: fx.session.cookie } })).status).toBe(404);
  });

  test("the checkout page and Pay need a session; Pay refuses a cross-site post", async () => {
    const { path } = await startPack();
    expect((await fx.context.request(path)).status).toBe(401);
    expect((await fx.context.request(path, { headers: fx.org.auth })).status).toBe(401);
    expect((await postForm(fx.context, `${path}/pay`, {})).status).toBe(401);
    expect((await postForm(fx.context, `${path}/pay`, { cookie: fx.session.cookie, origin: "https://evil.example" })).status).toBe(403);
    expect((await balance()).available).toBe(0);
  });

  test("in production the page has no Pay button, names the operator command, and Pay is 403", async () => {
    await fx.context.close();
    fx = await billingFixture({ env: { PRICE_ENV: "production" } });
    const { checkoutId, path } = await startPack();
    const html = await (await fx.context.request(path, { headers: { cookie: fx.session.cookie } })).text();
    expect(html).not.toContain("<form");
    expect(html).toContain(`price-service orders complete ${checkoutId}`);
    const pay = await postForm(fx.context, `${path}/pay`, fx.session.headers);
    expect(pay.status).toBe(403);
    expect((await json(pay)).type).toEndWith("/problems/forbidden");
    expect((await balance()).available).toBe(0);
  });
});

describe("Idempotency-Key on the billing POSTs", () => {
  const keyed = (key: string) => ({ ...fx.session.headers, "idempotency-key": key });

  test.each([
    ["checkout/pack", { packId: "pack-1k" }, { packId: "pack-10k" }],
    ["checkout/subscription", { planId: "basic-monthly" }, { planId: "pro-monthly" }],
    ["portal", {}, { returnUrl: "https://example.com/back" }],
  ])("%s: the same key and body replay the first answer, another body is 422", async (route, body, otherBody) => {
    const first = await postJSON(fx.context, `${BILLING}/${route}`, body, keyed(`k-${route}`));
    expect([200, 201]).toContain(first.status);
    const firstBody = await json(first);
    const replay = await postJSON(fx.context, `${BILLING}/${route}`, body, keyed(`k-${route}`));
    expect(replay.status).toBe(first.status);
    expect(replay.headers.get("idempotent-replayed")).toBe("true");
    expect(await json(replay)).toEqual(firstBody);
    const other = await postJSON(fx.context, `${BILLING}/${route}`, otherBody, keyed(`k-${route}`));
    expect(other.status).toBe(422);
    expect((await json(other)).type).toEndWith("/unprocessable-body");
  });

  test("a replayed pack checkout creates one order, not two", async () => {
    await postJSON(fx.context, `${BILLING}/checkout/pack`, { packId: "pack-1k" }, keyed("one-order"));
    await postJSON(fx.context, `${BILLING}/checkout/pack`, { packId: "pack-1k" }, keyed("one-order"));
    const orders = await fx.context.store.listOrders({ organizationId: fx.org.organizationId, limit: 10 });
    expect(orders.items).toHaveLength(1);
  });

  test("the same key sent twice at once: one runs, the other is 409", async () => {
    // The first request is held inside its work (after its claim) until the second has been answered,
    // so the two overlap on either store, whatever the timing of its round trips.
    const store = fx.context.store;
    const createOrder = store.createOrder.bind(store);
    let reached!: () => void;
    const inside = new Promise<void>((resolve) => (reached = resolve));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    store.createOrder = async (order) => {
      reached();
      await gate;
      return createOrder(order);
    };
    const first = postJSON(fx.context, `${BILLING}/checkout/pack`, { packId: "pack-1k" }, keyed("race"));
    await inside;
    const second = await postJSON(fx.context, `${BILLING}/checkout/pack`, { packId: "pack-1k" }, keyed("race"));
    release();
    expect([(await first).status, second.status]).toEqual([201, 409]);
  });
});
