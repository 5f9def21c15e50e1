import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createOrganization, createTestContext, json, ledgerSum, type TestOrganization } from "../support/context";
import { BILLING, postJSON } from "./fixtures";
import { createSession, type TestSession } from "./session-helper";
import { createStripeTestContext, deliver, type StripeTestContext, stripeEvent } from "./stripe-stand-in";

let context: StripeTestContext;
let org: TestOrganization;
let session: TestSession;

beforeEach(async () => {
  context = await createStripeTestContext();
  org = await createOrganization(context, 0);
  session = await createSession(context, org.organizationId);
});
afterEach(async () => {
  await context.close();
});

async function balance(organizationId = org.organizationId) {
  return context.store.getBalance(organizationId, context.clock.now());
}

async function startCheckout(kind: "pack" | "subscription", id: string): Promise<{ checkoutId: string; checkoutUrl: string }> {
  const response = await postJSON(context, `${BILLING}/checkout/${kind}`, kind === "pack" ? { packId: id } : { planId: id }, session.headers);
  expect(response.status).toBe(201);
  return json(response);
}

/** A completed Checkout Session as Stripe sends it in checkout.session.completed. */
async function paidSession(checkoutId: string, overrides: Record<string, unknown> = {}) {
  const order = (await context.store.getOrder(checkoutId))!;
  return {
    id: order.providerRef,
    object: "checkout.session",
    mode: order.kind === "pack" ? "payment" : "subscription",
    client_reference_id: order.id,
    customer: await context.store.getStripeCustomerId(order.organizationId),
    payment_intent: order.kind === "pack" ? `pi_${order.id}` : null,
    subscription: order.kind === "subscription" ? "sub_stripe_1" : null,
    amount_total: order.amount,
    currency: order.currency.toLowerCase(),
    payment_status: "paid",
    status: "complete",
    metadata: { orderId: order.id, organizationId: order.organizationId },
    ...overrides,
  };
}

function subscriptionInvoice(id: string, overrides: Record<string, unknown> = {}) {
  return {
    id,
    object: "invoice",
    customer: "cus_standin1",
    amount_paid: 2900,
    billing_reason: "subscription_cycle",
    currency: "eur",
    status: "paid",
    parent: {
      type: "subscription_details",
      subscription_details: {
        subscription: "sub_stripe_1",
        metadata: { organizationId: org.organizationId, itemId: "basic-monthly", planName: "Basic", creditsPerPeriod: "5000" },
      },
    },
    lines: { object: "list", data: [{ id: "il_1", object: "line_item", period: { start: 1_795_341_600, end: 1_797_933_600 } }], has_more: false },
    ...overrides,
  };
}

describe("Stripe checkout, portal and invoices through the SDK", () => {
  test("a pack checkout creates the organization's customer once and a payment-mode Checkout Session", async () => {
    const first = await startCheckout("pack", "pack-1k");
    expect(first.checkoutId).toMatch(/^ord_/);
    expect(first.checkoutUrl).toMatch(/^https:\/\/checkout\.stripe\.test\/c\/pay\/cs_test_standin\d+$/);
    await startCheckout("pack", "pack-10k");

    const customers = context.standIn.calls("POST", "/v1/customers");
    expect(customers).toHaveLength(1);
    expect(customers[0]!.params.get("name")).toBe("Test Org");
    expect(customers[0]!.params.get("metadata[organizationId]")).toBe(org.organizationId);
    expect(customers[0]!.authorization).toBe("Bearer sk_test_standin");
    expect(await context.store.getStripeCustomerId(org.organizationId)).toBe("cus_standin1");

    const [session1] = context.standIn.calls("POST", "/v1/checkout/sessions");
    const p = session1!.params;
    expect(p.get("mode")).toBe("payment");
    expect(p.get("customer")).toBe("cus_standin1");
    expect(p.get("client_reference_id")).toBe(first.checkoutId);
    expect(p.get("line_items[0][price_data][unit_amount]")).toBe("1000");
    expect(p.get("line_items[0][price_data][currency]")).toBe("eur");
    expect(p.get("invoice_creation[enabled]")).toBe("true");
    expect(p.get("success_url")).toBe("http://localhost:8080/billing/return?checkout=success");
    expect(p.get("cancel_url")).toBe("http://localhost:8080/billing/return?checkout=canceled");
    expect(session1!.idempotencyKey).toBe(`price-service-checkout-${first.checkoutId}`);

    const order = await context.store.getOrder(first.checkoutId);
    expect(order).toMatchObject({ status: "pending", provider: "stripe", providerRef: new URL(first.checkoutUrl).pathname.split("/").pop() });
    expect((await balance()).available).toBe(0);
  });

  test("a subscription checkout is a subscription-mode session whose subscription carries the credits per period", async () => {
    const { checkoutId } = await startCheckout("subscription", "pro-monthly");
    const p = context.standIn.calls("POST", "/v1/checkout/sessions")[0]!.params;
    expect(p.get("mode")).toBe("subscription");
    expect(p.get("line_items[0][price_data][recurring][interval]")).toBe("month");
    expect(p.get("line_items[0][price_data][unit_amount]")).toBe("19900");
    expect(p.get("subscription_data[metadata][creditsPerPeriod]")).toBe("50000");
    expect(p.get("subscription_data[metadata][amountPerPeriod]")).toBe("19900");
    expect(p.get("subscription_data[metadata][organizationId]")).toBe(org.organizationId);
    expect(p.get("subscription_data[metadata][orderId]")).toBe(checkoutId);
  });

  test("when Stripe fails, checkout answers 503 unavailable and stores no order", async () => {
    context.standIn.failing = true;
    const response = await postJSON(context, `${BILLING}/checkout/pack`, { packId: "pack-1k" }, session.headers);
    expect(response.status).toBe(503);
    expect((await json(response)).type).toEndWith("/problems/unavailable");
    expect((await context.store.listOrders({ limit: 10 })).items).toHaveLength(0);
    expect(context.logs.join("")).not.toContain("sk_test_standin");
  });

  test("the portal is a Billing Portal session of the organization's customer", async () => {
    const response = await postJSON(context, `${BILLING}/portal`, { returnUrl: "https://app.example/billing" }, session.headers);
    expect(response.status).toBe(200);
    expect((await json(response)).url).toMatch(/^https:\/\/billing\.stripe\.test\/p\/session\//);
    const [call] = context.standIn.calls("POST", "/v1/billing_portal/sessions");
    expect(call!.params.get("customer")).toBe("cus_standin1");
    expect(call!.params.get("return_url")).toBe("https://app.example/billing");
  });

  test("invoices are read from Stripe for the organization's customer, mapped to the contract and paged", async () => {
    await startCheckout("pack", "pack-1k");
    const invoice = (n: number, status: string) => ({
      id: `in_test${n}`,
      object: "invoice",
      customer: "cus_standin1",
      number: `ABC-000${n}`,
      status,
      total: 1000 * n,
      currency: "eur",
      created: 1_795_341_600 + n,
      hosted_invoice_url: `https://invoice.stripe.test/i/${n}`,
      invoice_pdf: `https://pay.stripe.test/invoice/${n}/pdf`,
    });
    context.standIn.invoices.push(invoice(3, "paid"), invoice(2, "uncollectible"), invoice(1, "void"), { ...invoice(9, "paid"), customer: "cus_someone_else" });
    const first = await json(await context.request(`${BILLING}/invoices?limit=2`, { headers: org.auth }));
    expect(first.items).toEqual([
      {
        id: "in_test3",
        number: "ABC-0003",
        status: "paid",
        total: { amount: 3000, currency: "EUR", formatted: "€30.00" },
        createdAt: "2026-11-22T10:00:03.000Z",
        hostedUrl: "https://invoice.stripe.test/i/3",
        pdfUrl: "https://pay.stripe.test/invoice/3/pdf",
      },
      expect.objectContaining({ id: "in_test2", status: "open" }),
    ]);
    expect(first.nextCursor).toBe("in_test2");
    const second = await json(await context.request(`${BILLING}/invoices?limit=2&cursor=${first.nextCursor}`, { headers: session.headers }));
    expect(second.items.map((i: { id: string; status: string }) => [i.id, i.status])).toEqual([["in_test1", "void"]]);
    expect(second.nextCursor).toBeNull();
    expect(context.standIn.calls("GET", "/v1/invoices")[1]!.params.get("starting_after")).toBe("in_test2");
  });

  test("an organization that never checked out has no invoices, without asking Stripe", async () => {
    const response = await context.request(`${BILLING}/invoices`, { headers: org.auth });
    expect(await json(response)).toEqual({ items: [], nextCursor: null });
    expect(context.standIn.calls("GET", "/v1/invoices")).toHaveLength(0);
  });
});

describe("POST /api/v1/webhooks/stripe", () => {
  test("a verified checkout.session.completed for a pack credits the pack once, and a replay credits nothing more", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    const payload = stripeEvent("evt_pack_1", "checkout.session.completed", await paidSession(checkoutId));
    const response = await deliver(context, payload);
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({ received: true, applied: true });
    expect((await balance()).available).toBe(1000);
    expect((await context.store.getOrder(checkoutId))!.status).toBe("completed");

    const replay = await deliver(context, payload);
    expect(replay.status).toBe(200);
    expect(await json(replay)).toEqual({ received: true, applied: false });
    expect((await balance()).available).toBe(1000);
    const ledger = await context.store.listTransactions(org.organizationId, { limit: 10 });
    expect(ledger.items.map((t) => `${t.type}${t.amount}`)).toEqual(["purchase1000"]);
  });

  test("the same event delivered concurrently credits once", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-10k");
    const payload = stripeEvent("evt_pack_race", "checkout.session.completed", await paidSession(checkoutId));
    const responses = await Promise.all(Array.from({ length: 6 }, () => deliver(context, payload)));
    expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200]);
    const applied = await Promise.all(responses.map(async (r) => (await json(r)).applied));
    expect(applied.filter(Boolean)).toHaveLength(1);
    expect((await balance()).available).toBe(10_000);
  });

  test("two different events for the same checkout (completed, then async payment succeeded) credit once", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    expect(await json(await deliver(context, stripeEvent("evt_a", "checkout.session.completed", await paidSession(checkoutId))))).toMatchObject({
      applied: true,
    });
    expect(await json(await deliver(context, stripeEvent("evt_b", "checkout.session.async_payment_succeeded", await paidSession(checkoutId))))).toMatchObject({
      applied: false,
    });
    expect((await balance()).available).toBe(1000);
  });

  test("a checkout completed with its payment still pending credits nothing until the async payment succeeds", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_unpaid", "checkout.session.completed", await paidSession(checkoutId, { payment_status: "unpaid" })));
    expect((await balance()).available).toBe(0);
    await deliver(context, stripeEvent("evt_async", "checkout.session.async_payment_succeeded", await paidSession(checkoutId)));
    expect((await balance()).available).toBe(1000);
  });

  test("a subscription's checkout completes its order and grants nothing: its invoices grant the periods", async () => {
    const { checkoutId } = await startCheckout("subscription", "basic-monthly");
    const completed = await deliver(context, stripeEvent("evt_sub_checkout", "checkout.session.completed", await paidSession(checkoutId)));
    expect(await json(completed)).toEqual({ received: true, applied: true });
    expect((await context.store.getOrder(checkoutId))!.status).toBe("completed");
    expect((await balance()).available).toBe(0);
    expect(await context.store.hasPayment(`pi_${checkoutId}`)).toBe(false);
  });

  test("a pack paid with no PaymentIntent (nothing charged) grants its credits and records no payment to refund", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_free", "checkout.session.completed", await paidSession(checkoutId, { payment_intent: null, amount_total: 0 })));
    expect((await balance()).available).toBe(1000);
    expect(await context.store.hasPayment(`pi_${checkoutId}`)).toBe(false);
  });

  test("a pack paid at a discount and refunded the whole amount paid loses all its credits", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_discounted", "checkout.session.completed", await paidSession(checkoutId, { amount_total: 500 })));
    const refund = { id: "ch_1", object: "charge", payment_intent: `pi_${checkoutId}`, amount: 500, amount_refunded: 500, currency: "eur" };
    expect(await json(await deliver(context, stripeEvent("evt_refund_all", "charge.refunded", refund)))).toEqual({ received: true, applied: true });
    expect((await balance()).available).toBe(0);
    // A payment known here is refunded under its own ref: Stripe is not asked for an invoice.
    expect(context.standIn.calls("GET", "/v1/invoice_payments")).toEqual([]);
  });

  test("a refund of a charge without a PaymentIntent is acknowledged, applies nothing and asks Stripe nothing", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_paid", "checkout.session.completed", await paidSession(checkoutId)));
    const refund = { id: "ch_other", object: "charge", payment_intent: null, amount: 1000, amount_refunded: 1000, currency: "eur" };
    expect(await json(await deliver(context, stripeEvent("evt_refund_other", "charge.refunded", refund)))).toEqual({ received: true, applied: false });
    expect((await balance()).available).toBe(1000);
    expect(context.standIn.calls("GET", "/v1/invoice_payments")).toEqual([]);
  });

  const badSignatures: Array<[string, (payload: string) => Promise<Response>]> = [
    ["a signature made with another secret", (payload) => deliver(context, payload, { secret: "whsec_attacker" })],
    ["a garbage signature header", (payload) => deliver(context, payload, { signature: "t=1,v1=deadbeef" })],
    [
      "no signature header at all",
      (payload) => context.request("/api/v1/webhooks/stripe", { method: "POST", headers: { "content-type": "application/json" }, body: payload }),
    ],
    [
      "a payload changed after signing",
      async (payload) => {
        const signature = await context.stripe.webhooks.generateTestHeaderStringAsync({ payload, secret: "whsec_test_standin_secret" });
        return deliver(context, payload.replace('"amount_total": 1000', '"amount_total": 1'), { signature });
      },
    ],
  ];
  for (const [what, send] of badSignatures) {
    test(`${what} is 400 invalid-body and credits nothing`, async () => {
      const { checkoutId } = await startCheckout("pack", "pack-1k");
      const response = await send(stripeEvent("evt_forged", "checkout.session.completed", await paidSession(checkoutId)));
      expect(response.status).toBe(400);
      expect(response.headers.get("content-type")).toStartWith("application/problem+json");
      expect(await json(response)).toMatchObject({
        type: expect.stringMatching(/\/problems\/invalid-body$/),
        detail: "The Stripe-Signature header does not verify this payload.",
      });
      expect((await balance()).available).toBe(0);
      expect((await context.store.getOrder(checkoutId))!.status).toBe("pending");
    });
  }

  test("a checkout session this service did not create is acknowledged and changes nothing", async () => {
    const response = await deliver(
      context,
      stripeEvent("evt_foreign", "checkout.session.completed", { id: "cs_other_system", object: "checkout.session", payment_status: "paid", mode: "payment" }),
    );
    expect(await json(response)).toEqual({ received: true, applied: false });
  });

  test("an event type the service does not use is acknowledged with 200", async () => {
    const response = await deliver(context, stripeEvent("evt_other", "customer.updated", { id: "cus_standin1", object: "customer" }));
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({ received: true, applied: false });
  });

  test("invoice.paid of a subscription grants the period's credits, expiring at the period's end, once", async () => {
    const { checkoutId } = await startCheckout("subscription", "basic-monthly");
    expect(await json(await deliver(context, stripeEvent("evt_sub_done", "checkout.session.completed", await paidSession(checkoutId))))).toMatchObject({
      applied: true,
    });
    expect((await balance()).available).toBe(0);
    const payload = stripeEvent("evt_inv_1", "invoice.paid", subscriptionInvoice("in_period1"));
    expect(await json(await deliver(context, payload))).toEqual({ received: true, applied: true });
    expect(await json(await deliver(context, payload))).toEqual({ received: true, applied: false });
    const after = await balance();
    expect(after.available).toBe(5000);
    expect(after.buckets).toEqual([expect.objectContaining({ source: "subscription", granted: 5000, expiresAt: 1_797_933_600_000 })]);
    // The next period is another invoice, another event: it grants again.
    await deliver(context, stripeEvent("evt_inv_2", "invoice.paid", subscriptionInvoice("in_period2")));
    expect((await balance()).available).toBe(10_000);
  });

  test("invoice.paid of a pack's invoice grants nothing more: the checkout already did", async () => {
    const response = await deliver(context, stripeEvent("evt_inv_pack", "invoice.paid", subscriptionInvoice("in_pack", { parent: null })));
    expect(await json(response)).toEqual({ received: true, applied: false });
    expect((await balance()).available).toBe(0);
  });

  test("charge.refunded claws back only the unspent credits of the refunded pack, with a refund transaction, once", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_paid", "checkout.session.completed", await paidSession(checkoutId)));
    const reservation = await context.store.reserveCredits({
      organizationId: org.organizationId,
      amount: 400,
      keyId: null,
      requestId: "req_spent",
      now: context.clock.now(),
    });
    if (!reservation.ok) throw new Error("reservation failed");
    await context.store.commitReservation(reservation.reservationId, { gtin: null, description: "spent", now: context.clock.now() });

    const refund = stripeEvent("evt_refund", "charge.refunded", {
      id: "ch_1",
      object: "charge",
      payment_intent: `pi_${checkoutId}`,
      amount: 1000,
      amount_refunded: 1000,
      refunded: true,
      currency: "eur",
    });
    expect(await json(await deliver(context, refund))).toEqual({ received: true, applied: true });
    expect(await json(await deliver(context, refund))).toEqual({ received: true, applied: false });
    expect((await balance()).available).toBe(0);
    const refunds = await context.store.listTransactions(org.organizationId, { limit: 10, types: ["refund"] });
    expect(refunds.items).toEqual([expect.objectContaining({ type: "refund", amount: -600, balanceAfter: 0 })]);
  });

  test("a partial refund claws back the same share of the credits; a later full refund the rest", async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    await deliver(context, stripeEvent("evt_paid", "checkout.session.completed", await paidSession(checkoutId)));
    const charge = (refunded: number) => ({
      id: "ch_1",
      object: "charge",
      payment_intent: `pi_${checkoutId}`,
      amount: 1000,
      amount_refunded: refunded,
      currency: "eur",
    });
    await deliver(context, stripeEvent("evt_r1", "charge.refunded", charge(250)));
    expect((await balance()).available).toBe(750);
    // An older, smaller cumulative amount arriving late takes nothing.
    await deliver(context, stripeEvent("evt_r0", "charge.refunded", charge(100)));
    expect((await balance()).available).toBe(750);
    await deliver(context, stripeEvent("evt_r2", "charge.refunded", charge(1000)));
    expect((await balance()).available).toBe(0);
  });

  test("refunding a subscription period's payment finds its invoice through Stripe and claws back that period's credits", async () => {
    await deliver(context, stripeEvent("evt_inv", "invoice.paid", subscriptionInvoice("in_sub_1")));
    context.standIn.invoicePayments.set("pi_sub_1", "in_sub_1");
    const response = await deliver(
      context,
      stripeEvent("evt_sub_refund", "charge.refunded", { id: "ch_2", object: "charge", payment_intent: "pi_sub_1", amount: 2900, amount_refunded: 2900 }),
    );
    expect(await json(response)).toEqual({ received: true, applied: true });
    expect((await balance()).available).toBe(0);
    expect(context.standIn.calls("GET", "/v1/invoice_payments")[0]!.params.get("payment[payment_intent]")).toBe("pi_sub_1");
  });

  test("a refund arriving after its period's credits expired writes them off as expiry, once, and refunds none of them", async () => {
    await deliver(context, stripeEvent("evt_inv", "invoice.paid", subscriptionInvoice("in_sub_1")));
    const [bucket] = (await balance()).buckets;
    context.clock.set(bucket!.expiresAt!);
    context.standIn.invoicePayments.set("pi_sub_1", "in_sub_1");
    const refund = stripeEvent("evt_late_refund", "charge.refunded", {
      id: "ch_3",
      object: "charge",
      payment_intent: "pi_sub_1",
      amount: 2900,
      amount_refunded: 2900,
    });
    expect(await json(await deliver(context, refund))).toEqual({ received: true, applied: true });
    const rows = (await context.store.listTransactions(org.organizationId, { limit: 10, types: ["expiry", "refund"] })).items;
    expect(rows).toEqual([expect.objectContaining({ type: "expiry", amount: -5000, balanceAfter: 0, bucketId: bucket!.id })]);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(0);
  });

  test("a refund of a payment not known here is acknowledged, kept for that payment and changes no balance", async () => {
    const refund = stripeEvent("evt_unknown_refund", "charge.refunded", {
      id: "ch_3",
      object: "charge",
      payment_intent: "pi_elsewhere",
      amount: 500,
      amount_refunded: 500,
    });
    expect(await json(await deliver(context, refund))).toEqual({ received: true, applied: true });
    expect(await json(await deliver(context, refund))).toEqual({ received: true, applied: false });
    expect((await balance()).available).toBe(0);
    expect((await context.store.listTransactions(org.organizationId, { limit: 10 })).items).toEqual([]);
  });

  test("with the local provider the webhook endpoint is 404", async () => {
    const local = await createTestContext();
    try {
      const response = await local.request("/api/v1/webhooks/stripe", { method: "POST", headers: { "stripe-signature": "t=1,v1=x" }, body: "{}" });
      expect(response.status).toBe(404);
      expect((await json(response)).type).toEndWith("/problems/not-found");
    } finally {
      await local.close();
    }
  });
});

// Stripe promises neither order nor single delivery: whatever the order and however often each
// event arrives, the end state is the same.
describe("Stripe events in any order, delivered more than once", () => {
  const pack = async () => {
    const { checkoutId } = await startCheckout("pack", "pack-1k");
    const paymentIntent = `pi_${checkoutId}`;
    return {
      checkout: stripeEvent("evt_checkout", "checkout.session.completed", await paidSession(checkoutId)),
      refund: (refunded: number, id = `evt_refund_${refunded}`) =>
        stripeEvent(id, "charge.refunded", {
          id: "ch_1",
          object: "charge",
          payment_intent: paymentIntent,
          amount: 1000,
          amount_refunded: refunded,
          currency: "eur",
        }),
      dispute: (type: string, status: string) =>
        stripeEvent(`evt_${type}_${status}`, type, {
          id: "dp_1",
          object: "dispute",
          charge: "ch_1",
          payment_intent: paymentIntent,
          amount: 1000,
          currency: "eur",
          status,
        }),
    };
  };
  const ledger = async () => (await context.store.listTransactions(org.organizationId, { limit: 20 })).items.map((t) => `${t.type}${t.amount}`).sort();
  const deliverAll = async (payloads: string[]) => {
    for (const payload of payloads) expect((await deliver(context, payload)).status).toBe(200);
  };

  test("a full refund delivered before its checkout makes the late checkout grant nothing, and the ledger shows the grant and its refund", async () => {
    const events = await pack();
    expect(await json(await deliver(context, events.refund(1000)))).toEqual({ received: true, applied: true });
    expect((await balance()).available).toBe(0);
    expect(await json(await deliver(context, events.checkout))).toEqual({ received: true, applied: true });
    expect((await balance()).available).toBe(0);
    const rows = (await context.store.listTransactions(org.organizationId, { limit: 10 })).items;
    expect(rows.map((t) => [t.type, t.amount, t.balanceAfter])).toEqual([
      ["refund", -1000, 0],
      ["purchase", 1000, 1000],
    ]);
    expect(rows[0]!.description).toBe("Payment refunded or disputed before it was recorded: credits withdrawn");
  });

  test("a pack's refund delivered before its checkout is kept even when Stripe already names the pack's invoice for its payment", async () => {
    const events = await pack();
    const [order] = (await context.store.listOrders({ limit: 1 })).items;
    context.standIn.invoicePayments.set(`pi_${order!.id}`, "in_pack_receipt");
    await deliverAll([events.refund(1000), events.checkout, events.refund(1000)]);
    expect((await balance()).available).toBe(0);
    expect(await ledger()).toEqual(["purchase1000", "refund-1000"]);
  });

  test("a partial refund delivered before its checkout leaves only the part that was not refunded", async () => {
    const events = await pack();
    await deliverAll([events.refund(250), events.checkout]);
    expect((await balance()).available).toBe(750);
    await deliverAll([events.refund(1000)]);
    expect((await balance()).available).toBe(0);
  });

  for (const order of [
    ["checkout", "refund"],
    ["refund", "checkout"],
    ["refund", "refund", "checkout", "checkout"],
    ["checkout", "refund", "checkout", "refund"],
    ["refund", "checkout", "refund", "checkout"],
  ]) {
    test(`a checkout and its full refund delivered as ${order.join(", ")} end with nothing granted, one purchase and one refund row`, async () => {
      const events = await pack();
      await deliverAll(order.map((name) => (name === "checkout" ? events.checkout : events.refund(1000))));
      expect((await balance()).available).toBe(0);
      expect(await ledger()).toEqual(["purchase1000", "refund-1000"]);
    });
  }

  test("a checkout and its full refund delivered at the same moment, each twice, end with nothing granted", async () => {
    const events = await pack();
    const responses = await Promise.all(
      [events.checkout, events.refund(1000), events.refund(1000), events.checkout].map((payload) => deliver(context, payload)),
    );
    expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 200]);
    expect((await balance()).available).toBe(0);
    expect(await ledger()).toEqual(["purchase1000", "refund-1000"]);
  });

  const disputeOrders: Array<[string, string[], number, string[]]> = [
    ["checkout, dispute opened, dispute won", ["checkout", "opened", "won"], 1000, ["adjustment1000", "purchase1000", "refund-1000"]],
    ["dispute opened, checkout, dispute won", ["opened", "checkout", "won"], 1000, ["adjustment1000", "purchase1000", "refund-1000"]],
    ["dispute opened, dispute won, checkout", ["opened", "won", "checkout"], 1000, ["purchase1000"]],
    ["dispute won, dispute opened, checkout (closed before created)", ["won", "opened", "checkout"], 1000, ["purchase1000"]],
    ["checkout, dispute won, dispute opened", ["checkout", "won", "opened"], 1000, ["purchase1000"]],
    [
      "each twice: checkout, opened, won",
      ["checkout", "opened", "checkout", "opened", "won", "won", "opened"],
      1000,
      ["adjustment1000", "purchase1000", "refund-1000"],
    ],
    ["checkout, dispute opened, dispute lost", ["checkout", "opened", "lost"], 0, ["purchase1000", "refund-1000"]],
    ["dispute lost, checkout, dispute opened", ["lost", "checkout", "opened"], 0, ["purchase1000", "refund-1000"]],
    [
      "dispute opened, checkout, funds withdrawn, funds reinstated",
      ["opened", "checkout", "withdrawn", "reinstated"],
      1000,
      ["adjustment1000", "purchase1000", "refund-1000"],
    ],
  ];
  for (const [what, order, available, rows] of disputeOrders) {
    test(`a dispute delivered as ${what} ends with ${available} credits, each claw-back and give-back once`, async () => {
      const events = await pack();
      const payloads: Record<string, string> = {
        checkout: events.checkout,
        opened: events.dispute("charge.dispute.created", "needs_response"),
        withdrawn: events.dispute("charge.dispute.funds_withdrawn", "needs_response"),
        won: events.dispute("charge.dispute.closed", "won"),
        lost: events.dispute("charge.dispute.closed", "lost"),
        reinstated: events.dispute("charge.dispute.funds_reinstated", "won"),
      };
      await deliverAll(order.map((name) => payloads[name]!));
      expect((await balance()).available).toBe(available);
      expect(await ledger()).toEqual(rows);
    });
  }

  test("a won dispute gives back only the credits its claw-back took, not those spent meanwhile", async () => {
    const events = await pack();
    await deliverAll([events.checkout]);
    const reservation = await context.store.reserveCredits({
      organizationId: org.organizationId,
      amount: 400,
      keyId: null,
      requestId: "req_spent",
      now: context.clock.now(),
    });
    if (!reservation.ok) throw new Error("reservation failed");
    await context.store.commitReservation(reservation.reservationId, { gtin: null, description: "spent", now: context.clock.now() });
    await deliverAll([events.dispute("charge.dispute.created", "needs_response")]);
    expect((await balance()).available).toBe(0);
    await deliverAll([events.dispute("charge.dispute.closed", "won")]);
    expect((await balance()).available).toBe(600);
    expect(await ledger()).toEqual(["adjustment600", "purchase1000", "refund-600", "usage-400"]);
  });

  const periodDispute = (type: string, status: string) =>
    stripeEvent(`evt_${type}_${status}`, type, {
      id: "dp_2",
      object: "dispute",
      charge: "ch_2",
      payment_intent: "pi_sub_1",
      amount: 2900,
      currency: "eur",
      status,
    });
  /** A subscription period paid by invoice in_sub_1, then disputed: its credits are withdrawn. Returns when they expire. */
  const disputedPeriod = async () => {
    await deliverAll([stripeEvent("evt_inv", "invoice.paid", subscriptionInvoice("in_sub_1"))]);
    context.standIn.invoicePayments.set("pi_sub_1", "in_sub_1");
    const expiresAt = (await balance()).buckets[0]!.expiresAt!;
    await deliverAll([periodDispute("charge.dispute.created", "needs_response")]);
    expect((await balance()).available).toBe(0);
    return expiresAt;
  };

  test("a dispute of a period's payment won before its credits expire gives them all back", async () => {
    const expiresAt = await disputedPeriod();
    context.clock.set(expiresAt - 1);
    await deliverAll([periodDispute("charge.dispute.closed", "won")]);
    expect((await balance()).available).toBe(5000);
    expect(await ledger()).toEqual(["adjustment5000", "refund-5000", "subscription5000"]);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(5000);
  });

  test("a dispute of a period's payment won once its credits expired gives none of them back", async () => {
    const expiresAt = await disputedPeriod();
    const before = await ledger();
    context.clock.set(expiresAt);
    await deliverAll([periodDispute("charge.dispute.closed", "won")]);
    expect(await ledger()).toEqual(before);
    expect(await ledgerSum(context.store, org.organizationId)).toBe(0);
  });

  test("a dispute inquiry moves no credits", async () => {
    const events = await pack();
    await deliverAll([events.checkout, events.dispute("charge.dispute.created", "warning_needs_response")]);
    expect((await balance()).available).toBe(1000);
  });

  test("a subscription period's refund delivered before its invoice.paid makes the invoice grant nothing", async () => {
    context.standIn.invoicePayments.set("pi_sub_early", "in_early");
    await deliverAll([
      stripeEvent("evt_early_refund", "charge.refunded", { id: "ch_9", object: "charge", payment_intent: "pi_sub_early", amount: 2900, amount_refunded: 2900 }),
    ]);
    await deliverAll([stripeEvent("evt_late_invoice", "invoice.paid", subscriptionInvoice("in_early"))]);
    expect((await balance()).available).toBe(0);
    expect(await ledger()).toEqual(["refund-5000", "subscription5000"]);
  });
});

describe("invoice.paid grants according to what was paid", () => {
  const cases: Array<[string, Record<string, unknown>, boolean, number]> = [
    ["the first invoice of a subscription (subscription_create) at the plan's price grants a period", { billing_reason: "subscription_create" }, true, 5000],
    ["a renewal (subscription_cycle) at the plan's price grants a period", { billing_reason: "subscription_cycle" }, true, 5000],
    ["a 0-amount invoice grants nothing", { billing_reason: "subscription_cycle", amount_paid: 0 }, false, 0],
    ["a proration invoice of a plan change (subscription_update) grants nothing", { billing_reason: "subscription_update", amount_paid: 1450 }, false, 0],
    ["a 0-amount proration invoice grants nothing", { billing_reason: "subscription_update", amount_paid: 0 }, false, 0],
    ["a manual invoice on the subscription grants nothing", { billing_reason: "manual" }, false, 0],
    [
      "a renewal paid at half the plan's price (a discount) grants half the period's credits",
      { billing_reason: "subscription_cycle", amount_paid: 1450 },
      true,
      2500,
    ],
    ["a renewal paid above the plan's price grants one period, never more", { billing_reason: "subscription_cycle", amount_paid: 5800 }, true, 5000],
  ];
  for (const [what, overrides, applied, credits] of cases) {
    test(what, async () => {
      const response = await deliver(context, stripeEvent("evt_invoice", "invoice.paid", subscriptionInvoice("in_case", overrides)));
      expect(await json(response)).toEqual({ received: true, applied });
      expect((await balance()).available).toBe(credits);
    });
  }

  const YEAR_LATER = Date.parse("2027-11-22T10:00:00.000Z");
  const metadataCases: Array<[string, Record<string, string>, Record<string, unknown>, number, { expiresAt?: number; description?: string }?]> = [
    ["credits per period in the subscription's metadata win over its plan's", { itemId: "basic-monthly", creditsPerPeriod: "1" }, {}, 1],
    ["without credits per period in the metadata, its plan's period is paid at the plan's price", { itemId: "pro-monthly" }, { amount_paid: 19_900 }, 50_000],
    ["an unknown plan without credits per period in the metadata grants nothing", { itemId: "nope", amountPerPeriod: "2900" }, {}, 0],
    ["an unknown plan without a price per period in the metadata grants nothing", { itemId: "nope", creditsPerPeriod: "5000" }, {}, 0],
    ["0 credits per period grants nothing", { creditsPerPeriod: "0", amountPerPeriod: "2900" }, {}, 0],
    [
      "1 credit per period is granted, named after no plan",
      { creditsPerPeriod: "1", amountPerPeriod: "2900" },
      {},
      1,
      { description: 'Subscription "subscription": 1 credits until 2026-12-22' },
    ],
    ["a payment worth less than a credit grants nothing", { creditsPerPeriod: "1", amountPerPeriod: "2900" }, { amount_paid: 1000 }, 0],
    ["a payment worth exactly one credit grants it", { itemId: "basic-monthly", creditsPerPeriod: "5000" }, { amount_paid: 1 }, 1],
    ["an invoice of no known organization grants nothing", { organizationId: "org_nope", itemId: "basic-monthly" }, { customer: "cus_nope" }, 0],
    [
      "the period ends when the invoice's first line with a period says, and the grant carries the metadata's plan name",
      { itemId: "basic-monthly", planName: "Custom" },
      {
        lines: {
          object: "list",
          data: [
            { id: "il_0", object: "line_item" },
            { id: "il_1", object: "line_item", period: { start: 1, end: 1_800_000_000 } },
          ],
        },
      },
      5000,
      { expiresAt: 1_800_000_000_000, description: 'Subscription "Custom": 5,000 credits until 2027-01-15' },
    ],
    [
      "without a plan or a line's period, the period is a month from now",
      { creditsPerPeriod: "10", amountPerPeriod: "2900" },
      { lines: { object: "list", data: [], has_more: false } },
      10,
      { expiresAt: Date.parse("2026-12-22T10:00:00.000Z") },
    ],
    [
      "without a line's period, the period is the plan's interval from now",
      { itemId: "pro-yearly" },
      { amount_paid: 199_000, lines: { object: "list", data: [], has_more: false } },
      600_000,
      { expiresAt: YEAR_LATER },
    ],
  ];
  for (const [what, metadata, overrides, credits, expected] of metadataCases) {
    test(what, async () => {
      const subscription = { subscription: "sub_stripe_1", metadata: { organizationId: org.organizationId, ...metadata } };
      const invoice = subscriptionInvoice("in_case", { parent: { type: "subscription_details", subscription_details: subscription }, ...overrides });
      const response = await deliver(context, stripeEvent("evt_invoice", "invoice.paid", invoice));
      expect(await json(response)).toEqual({ received: true, applied: credits > 0 });
      const { available, buckets } = await balance();
      expect(available).toBe(credits);
      if (expected?.expiresAt !== undefined) expect(buckets[0]!.expiresAt).toBe(expected.expiresAt);
      if (expected?.description !== undefined) {
        const [granted] = (await context.store.listTransactions(org.organizationId, { limit: 1, types: ["subscription"] })).items;
        expect(granted!.description).toBe(expected.description);
      }
    });
  }

  test("a proration invoice does not block the period granted by the next renewal", async () => {
    await deliver(
      context,
      stripeEvent("evt_proration", "invoice.paid", subscriptionInvoice("in_proration", { billing_reason: "subscription_update", amount_paid: 1450 })),
    );
    await deliver(context, stripeEvent("evt_cycle", "invoice.paid", subscriptionInvoice("in_cycle")));
    expect((await balance()).available).toBe(5000);
  });
});
