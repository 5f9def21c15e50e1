import { applyIdempotentResult, IdempotencyKeyHeader, runIdempotent } from "../../http/idempotency";
import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { CommonErrors, ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { requestLanguage } from "../../http/request";
import { authPlugin } from "../auth/plugin";
import type { Principal } from "../auth/guard";
import {
  BalanceResponse,
  CatalogResponse,
  CheckoutResponse,
  InvoiceSchema,
  InvoicesQuery,
  LanguageQuery,
  PackCheckoutBody,
  pageOf,
  PortalBody,
  PortalResponse,
  SubscriptionCheckoutBody,
  TransactionSchema,
  TransactionsQuery,
  UsageQuery,
  UsageResponse,
  WebhookResponse,
} from "./model";
import { usageReport } from "./usage";
import { billingPageRoutes } from "./page-routes";
import { catalogJSON, getBalance, listInvoices, listTransactions, openPortal, startPackCheckout, startSubscriptionCheckout, streamTransactionsCSV } from "./service";
import { wantsCSV } from "./negotiation";

const READ_ERRORS = { ...CommonErrors, 401: ProblemSchema, 503: ProblemSchema } as const;
const WRITE_ERRORS = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema, 409: ProblemSchema, 503: ProblemSchema } as const;
const SESSION_OR_KEY: Array<Record<string, string[]>> = [{ session: [] }, { apiKey: [] }];
const SESSION: Array<Record<string, string[]>> = [{ session: [] }];

function buyer(principal: Principal): { organizationId: string; userId: string | null } {
  return { organizationId: principal.organizationId, userId: principal.kind === "session" ? principal.userId : null };
}

/** The customer billing API (docs/api.md, "Billing"), the local provider's pages and the Stripe webhook. */
export function billingRoutes(services: Services) {
  return new Elysia({ name: "billing" }).use(billingAPIRoutes(services)).use(billingPageRoutes(services)).use(stripeWebhookRoutes(services));
}

function billingAPIRoutes(services: Services) {
  return new Elysia({ name: "billing.api", prefix: "/api/v1/customer/billing" })
    .use(authPlugin(services))
    .get("/catalog", ({ request }) => catalogJSON(services, requestLanguage(request)), {
      query: LanguageQuery,
      response: { 200: CatalogResponse, ...CommonErrors },
      detail: { summary: "Packs and plans on sale", description: "Public: no credential needed.", tags: ["Billing"], operationId: "getBillingCatalog", security: [] },
    })
    .get("/balance", ({ principal }) => getBalance(services, principal.organizationId), {
      auth: "sessionOrKey",
      response: { 200: BalanceResponse, ...READ_ERRORS },
      detail: {
        summary: "Credit balance and buckets",
        description: "Credits past their expiry are never counted as available, even before the expiry job has written them off.",
        tags: ["Billing"],
        operationId: "getBillingBalance",
        security: SESSION_OR_KEY,
      },
    })
    .get(
      "/transactions",
      ({ principal, query, request, set }) => {
        const language = requestLanguage(request);
        set.headers.vary = "Accept";
        if (!wantsCSV(query.format, request.headers.get("accept"))) return listTransactions(services, principal.organizationId, query, language);
        const csv = streamTransactionsCSV(services, principal.organizationId, query, language);
        set.headers["content-type"] = "text/csv; charset=utf-8";
        set.headers["content-disposition"] = 'attachment; filename="transactions.csv"';
        // A stream body: Elysia sends it as is (the 200 schema documents the JSON answer).
        return new Response(csv, { headers: set.headers as Record<string, string> }) as unknown as ReturnType<typeof listTransactions>;
      },
      {
        auth: "sessionOrKey",
        query: TransactionsQuery,
        response: { 200: pageOf(TransactionSchema), ...READ_ERRORS },
        detail: {
          summary: "Ledger transactions, newest first",
          description:
            "Filter by `type` and by creation time (`from` inclusive, `to` exclusive). Pages are stable while transactions are added. As CSV (`format=csv`, or `Accept: text/csv` preferred to JSON): every transaction the filters select from `cursor` on, `limit` ignored, newest first, streamed; the columns are the JSON fields, descriptions in the response language.",
          tags: ["Billing"],
          operationId: "listBillingTransactions",
          security: SESSION_OR_KEY,
          "x-alternative-content": {
            "200": {
              "text/csv": {
                schema: { type: "string", description: "RFC 4180 CSV with a header line: id,type,amount,balanceAfter,bucketId,keyId,requestId,gtin,description,createdAt" },
                example: "id,type,amount,balanceAfter,bucketId,keyId,requestId,gtin,description,createdAt\r\ntxn_0mwrd57q90000brqra5jtuxfecebe,usage,-1,41,bkt_0mwrd57q90000brqra5jtuxfecebe,key_0mwrd57q90000brqra5jtuxfecebe,req_0mwrd57q90000brqra5jtuxfecebe,04006381333931,Price look-up 04006381333931,2026-11-22T10:00:00.000Z\r\n",
              },
            },
          },
        },
      },
    )
    .get("/usage", ({ principal, query }) => usageReport(services, principal.organizationId, query), {
      auth: "sessionOrKey",
      query: UsageQuery,
      response: { 200: UsageResponse, ...READ_ERRORS },
      detail: {
        summary: "Requests and credits per hour or day",
        description:
          "Data requests of the organization's keys per period (UTC hours or days) by reason, billed and unbilled, and the credits they consumed; with `groupBy=key`, also per key. Read from hourly counters: credits and billed requests are counted in the debit's own transaction, so they always equal the ledger's usage rows; unbilled requests are written behind and show up at most about 2 seconds late. A range is at most 31 days hourly, 366 days daily.",
        tags: ["Billing"],
        operationId: "getBillingUsage",
        security: SESSION_OR_KEY,
      },
    })
    .get("/invoices", ({ principal, query, request }) => listInvoices(services, principal.organizationId, query, requestLanguage(request)), {
      auth: "sessionOrKey",
      query: InvoicesQuery,
      response: { 200: pageOf(InvoiceSchema), ...READ_ERRORS },
      detail: { summary: "Invoices of the payment provider, newest first", description: "Paged with `limit` and `cursor`. Session cookie or API key.", tags: ["Billing"], operationId: "listBillingInvoices", security: SESSION_OR_KEY },
    })
    .post(
      "/checkout/pack",
      async ({ principal, body, headers, set }) => {
        const result = await runIdempotent(
          services.store,
          { key: headers["idempotency-key"], organizationId: principal.organizationId, route: "POST /billing/checkout/pack", body: body ?? null, now: services.clock.now() },
          () => startPackCheckout(services, buyer(principal), body),
        );
        return applyIdempotentResult(set, result);
      },
      {
        auth: "session",
        headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
        body: PackCheckoutBody,
        response: { 201: CheckoutResponse, ...WRITE_ERRORS },
        detail: {
          summary: "Start a pack checkout",
          description: "Answers where to send the customer to pay. Credits are granted once the payment is confirmed. An unknown `packId` is 400 invalid-body.",
          tags: ["Billing"],
          operationId: "startPackCheckout",
          security: SESSION,
        },
      },
    )
    .post(
      "/checkout/subscription",
      async ({ principal, body, headers, set }) => {
        const result = await runIdempotent(
          services.store,
          { key: headers["idempotency-key"], organizationId: principal.organizationId, route: "POST /billing/checkout/subscription", body: body ?? null, now: services.clock.now() },
          () => startSubscriptionCheckout(services, buyer(principal), body),
        );
        return applyIdempotentResult(set, result);
      },
      {
        auth: "session",
        headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
        body: SubscriptionCheckoutBody,
        response: { 201: CheckoutResponse, ...WRITE_ERRORS },
        detail: {
          summary: "Start a subscription checkout",
          description: "Each paid period grants the plan's credits, expiring at the period's end. An unknown `planId` is 400 invalid-body.",
          tags: ["Billing"],
          operationId: "startSubscriptionCheckout",
          security: SESSION,
        },
      },
    )
    .post(
      "/portal",
      async ({ principal, body, headers, set }) => {
        const result = await runIdempotent(
          services.store,
          { key: headers["idempotency-key"], organizationId: principal.organizationId, route: "POST /billing/portal", body: body ?? null, now: services.clock.now() },
          () => openPortal(services, principal.organizationId, body ?? undefined),
        );
        return applyIdempotentResult(set, result);
      },
      {
        auth: "session",
        headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
        body: PortalBody,
        response: { 200: PortalResponse, ...WRITE_ERRORS },
        detail: { summary: "Open the billing portal", description: "Subscriptions (cancel) and invoices.", tags: ["Billing"], operationId: "openBillingPortal", security: SESSION },
      },
    );
}

function stripeWebhookRoutes(services: Services) {
  return new Elysia({ name: "billing.webhooks" }).post(
    "/api/v1/webhooks/stripe",
    async ({ request }) => {
      const { payments } = services;
      if (payments.receiveWebhook === undefined) throw new Problem("not-found", { detail: { en: "Stripe is not the payment provider of this service.", fr: "Stripe n'est pas le prestataire de paiement de ce service." } });
      // The signature covers the exact bytes Stripe sent: read them raw, never a re-serialized parse.
      return payments.receiveWebhook(await request.text(), request.headers.get("stripe-signature"));
    },
    {
      parse: "none",
      headers: t.Object({ "stripe-signature": t.Optional(t.String({ description: "Stripe's signature of the raw body" })) }),
      response: { 200: WebhookResponse, 400: ProblemSchema, 404: ProblemSchema, 413: ProblemSchema, 500: ProblemSchema, 503: ProblemSchema },
      detail: {
        summary: "Stripe webhook",
        description:
          "Signature-verified with STRIPE_WEBHOOK_SECRET. Applies checkout.session.completed, checkout.session.async_payment_succeeded, invoice.paid and charge.refunded, each event exactly once; other events are acknowledged. A bad signature is 400.",
        tags: ["Webhooks"],
        operationId: "receiveStripeWebhook",
        security: [],
      },
    },
  );
}
