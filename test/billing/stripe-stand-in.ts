// A local stand-in for the few Stripe endpoints the Stripe provider calls, so the real `stripe` SDK
// can be exercised end to end (host/port/protocol options) without the network.
import Stripe from "stripe";
import { createTestContext, type TestContext } from "../support/context";

export const WEBHOOK_SECRET = "whsec_test_standin_secret";

export interface RecordedRequest {
  method: string;
  path: string;
  params: URLSearchParams;
  idempotencyKey: string | null;
  authorization: string | null;
}

export interface StripeStandIn {
  port: number;
  requests: RecordedRequest[];
  /** Invoices served by GET /v1/invoices, newest first, filtered by customer. */
  invoices: Array<Record<string, unknown> & { id: string; customer: string }>;
  /** PaymentIntent id → the invoice it paid, for GET /v1/invoice_payments. */
  invoicePayments: Map<string, string>;
  /** When set, every call answers a Stripe 500 error. */
  failing: boolean;
  calls(method: string, path: string): RecordedRequest[];
  stop(): void;
}

function stripeError(status: number, message: string): Response {
  return Response.json({ error: { type: status >= 500 ? "api_error" : "invalid_request_error", message } }, { status });
}

export function startStripeStandIn(): StripeStandIn {
  let sequence = 0;
  const byIdempotencyKey = new Map<string, unknown>();
  const standIn: StripeStandIn = {
    port: 0,
    requests: [],
    invoices: [],
    invoicePayments: new Map(),
    failing: false,
    calls: (method, path) => standIn.requests.filter((r) => r.method === method && r.path === path),
    stop: () => server.stop(true),
  };

  const create = (key: string | null, make: () => unknown): Response => {
    if (key !== null && byIdempotencyKey.has(key)) return Response.json(byIdempotencyKey.get(key));
    const object = make();
    if (key !== null) byIdempotencyKey.set(key, object);
    return Response.json(object);
  };

  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request) {
      const url = new URL(request.url);
      const params = request.method === "GET" ? url.searchParams : new URLSearchParams(await request.text());
      const key = request.headers.get("idempotency-key");
      standIn.requests.push({ method: request.method, path: url.pathname, params, idempotencyKey: key, authorization: request.headers.get("authorization") });
      if (standIn.failing) return stripeError(500, "stand-in is failing on purpose");
      const route = `${request.method} ${url.pathname}`;
      switch (route) {
        case "POST /v1/customers":
          return create(key, () => ({
            id: `cus_standin${++sequence}`,
            object: "customer",
            name: params.get("name"),
            metadata: { organizationId: params.get("metadata[organizationId]") },
          }));
        case "POST /v1/checkout/sessions":
          return create(key, () => {
            const id = `cs_test_standin${++sequence}`;
            return {
              id,
              object: "checkout.session",
              url: `https://checkout.stripe.test/c/pay/${id}`,
              mode: params.get("mode"),
              customer: params.get("customer"),
              client_reference_id: params.get("client_reference_id"),
              status: "open",
              payment_status: "unpaid",
            };
          });
        case "POST /v1/billing_portal/sessions":
          return Response.json({
            id: `bps_standin${++sequence}`,
            object: "billing_portal.session",
            customer: params.get("customer"),
            return_url: params.get("return_url"),
            url: `https://billing.stripe.test/p/session/test_${sequence}`,
          });
        case "GET /v1/invoices": {
          const mine = standIn.invoices.filter((invoice) => invoice.customer === params.get("customer"));
          const after = params.get("starting_after");
          const start = after === null ? 0 : mine.findIndex((invoice) => invoice.id === after) + 1;
          const limit = Number(params.get("limit") ?? 10);
          const data = mine.slice(start, start + limit);
          return Response.json({ object: "list", url: "/v1/invoices", has_more: start + limit < mine.length, data });
        }
        case "GET /v1/invoice_payments": {
          const paymentIntent = params.get("payment[payment_intent]");
          const invoice = paymentIntent === null ? undefined : standIn.invoicePayments.get(paymentIntent);
          const data =
            invoice === undefined
              ? []
              : [{ id: `inpay_${paymentIntent}`, object: "invoice_payment", invoice, payment: { type: "payment_intent", payment_intent: paymentIntent } }];
          return Response.json({ object: "list", url: "/v1/invoice_payments", has_more: false, data });
        }
        default:
          return stripeError(404, `stand-in has no ${route}`);
      }
    },
  });
  standIn.port = server.port!;
  return standIn;
}

export interface StripeTestContext extends TestContext {
  stripe: Stripe;
  standIn: StripeStandIn;
}

/** createTestContext with BILLING_PROVIDER=stripe and the SDK pointed at a fresh stand-in. */
export async function createStripeTestContext(env: Record<string, string> = {}): Promise<StripeTestContext> {
  const standIn = startStripeStandIn();
  const stripe = new Stripe("sk_test_standin", { host: "127.0.0.1", port: standIn.port, protocol: "http", maxNetworkRetries: 0 });
  const context = await createTestContext(
    { BILLING_PROVIDER: "stripe", STRIPE_SECRET_KEY: "sk_test_standin", STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET, ...env },
    { stripe },
  );
  return {
    ...context,
    stripe,
    standIn,
    close: async () => {
      standIn.stop();
      await context.close();
    },
  };
}

/** A Stripe event as delivered to webhooks, pretty-printed so only raw-body verification accepts it. */
export function stripeEvent(id: string, type: string, object: Record<string, unknown>, created = 1_795_341_600): string {
  return JSON.stringify(
    {
      id,
      object: "event",
      api_version: "2026-10-28.endive",
      created,
      type,
      livemode: false,
      pending_webhooks: 1,
      request: { id: null, idempotency_key: null },
      data: { object },
    },
    null,
    2,
  );
}

/** Delivers a payload to the webhook endpoint, signed by the SDK's own test-header helper. */
export async function deliver(context: StripeTestContext, payload: string, options: { secret?: string; signature?: string } = {}): Promise<Response> {
  const signature = options.signature ?? (await context.stripe.webhooks.generateTestHeaderStringAsync({ payload, secret: options.secret ?? WEBHOOK_SECRET }));
  return context.request("/api/v1/webhooks/stripe", {
    method: "POST",
    headers: { "content-type": "application/json", "stripe-signature": signature },
    body: payload,
  });
}
