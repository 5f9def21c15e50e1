import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { requestLanguage } from "../../http/request";
import { authPlugin } from "../auth/plugin";
import { checkoutPage, invoicePage, PAGE_HEADERS, portalPage, returnPage } from "./pages";
import { oneOf } from "./model";
import { completeLocalOrder } from "./service";

const HTML = t.String({ contentMediaType: "text/html", description: "HTML page" });
// An empty string, not t.Null: the OpenAPI plugin writes a void schema where a content map belongs.
const SeeOther = (where: string) => t.String({ maxLength: 0, description: `See Other: the Location header leads to ${where}` });
// 400: an id or query value the page cannot have (an id over 100 characters, say).
const PAGE_ERRORS = { 400: ProblemSchema, 401: ProblemSchema, 403: ProblemSchema, 404: ProblemSchema, 500: ProblemSchema } as const;
const SESSION: Array<Record<string, string[]>> = [{ session: [] }];
const NOT_FOUND = new Problem("not-found");
const ReturnParam = t.Optional(t.String({ pattern: "^https?://[^\\s]+$", maxLength: 2000, description: "Where the portal's back link leads" }));

function html(body: string): Response {
  return new Response(body, { headers: PAGE_HEADERS });
}

function seeOther(location: string): Response {
  return new Response(null, { status: 303, headers: { location } });
}

/**
 * The browser side of the local provider. Every page needs the session of a member of the
 * organization the order, invoice or subscription belongs to; anything else is 404, never 403.
 */
export function billingPageRoutes(services: Services) {
  const { store, clock, config, payments } = services;
  const routes = new Elysia({ name: "billing.pages", prefix: "/billing" }).get(
    "/return",
    ({ query, request }) => html(returnPage(query.checkout, requestLanguage(request))),
    {
      query: t.Object({ checkout: t.Optional(oneOf(["success", "canceled"])) }),
      response: { 200: HTML, 400: ProblemSchema, 500: ProblemSchema },
      detail: {
        summary: "Landing page after a checkout or the portal",
        description: "HTML page; public.",
        tags: ["Billing pages"],
        operationId: "getBillingReturnPage",
        security: [],
      },
    },
  );
  if (payments.name !== "local") return routes;

  const organizationName = async (id: string) => (await store.getOrganization(id))?.name ?? id;
  const ownOrder = async (organizationId: string, id: string) => {
    const order = await store.getOrder(id);
    if (order === null || order.organizationId !== organizationId || order.provider !== "local") throw NOT_FOUND;
    return order;
  };

  return routes
    .use(authPlugin(services))
    .get(
      "/checkout/:id",
      async ({ params, principal, request }) => {
        const order = await ownOrder(principal.organizationId, params.id);
        return html(
          checkoutPage({
            order,
            organizationName: await organizationName(order.organizationId),
            language: requestLanguage(request),
            catalog: services.catalog,
            canPay: config.env === "development",
          }),
        );
      },
      {
        auth: "session",
        params: t.Object({ id: t.String({ maxLength: 100 }) }),
        response: { 200: HTML, ...PAGE_ERRORS },
        detail: {
          summary: "Local checkout page",
          description: "HTML page of the local payment provider for one order of the signed-in organization; 404 for any other order.",
          tags: ["Billing pages"],
          operationId: "getLocalCheckoutPage",
          security: SESSION,
        },
      },
    )
    .post(
      "/checkout/:id/pay",
      async ({ params, principal }) => {
        if (config.env !== "development") {
          throw new Problem("forbidden", {
            detail: {
              en: "In production an operator completes local orders: price-service orders complete <id>.",
              fr: "En production, un opérateur finalise les commandes locales : price-service orders complete <id>.",
            },
          });
        }
        const order = await ownOrder(principal.organizationId, params.id);
        await completeLocalOrder({ store, clock }, order.id);
        return seeOther(order.successUrl ?? `/billing/checkout/${order.id}`);
      },
      {
        auth: "session",
        parse: "none",
        params: t.Object({ id: t.String({ maxLength: 100 }) }),
        response: { 303: SeeOther("the order's successUrl, or back to the checkout page"), ...PAGE_ERRORS },
        detail: {
          summary: "Pay a local order (development mode)",
          description: "Completes the order and redirects (303) to its successUrl; no body.",
          tags: ["Billing pages"],
          operationId: "payLocalOrder",
          security: SESSION,
        },
      },
    )
    .get(
      "/invoices/:id",
      async ({ params, principal, request }) => {
        const invoice = await store.getInvoice(params.id);
        if (invoice === null || invoice.organizationId !== principal.organizationId) throw NOT_FOUND;
        return html(
          invoicePage({
            invoice,
            organizationId: invoice.organizationId,
            organizationName: await organizationName(invoice.organizationId),
            issuer: new URL(config.publicUrl).host,
            language: requestLanguage(request),
            catalog: services.catalog,
          }),
        );
      },
      {
        auth: "session",
        params: t.Object({ id: t.String({ maxLength: 100 }) }),
        response: { 200: HTML, ...PAGE_ERRORS },
        detail: {
          summary: "Printable local invoice",
          description: "HTML page of one invoice of the signed-in organization; 404 for any other invoice.",
          tags: ["Billing pages"],
          operationId: "getLocalInvoicePage",
          security: SESSION,
        },
      },
    )
    .get(
      "/portal",
      async ({ query, principal, request }) => {
        const [subscriptions, invoices] = await Promise.all([
          store.listSubscriptions(principal.organizationId),
          store.listInvoices(principal.organizationId, { limit: 50 }),
        ]);
        return html(
          portalPage({
            organizationName: await organizationName(principal.organizationId),
            subscriptions,
            invoices: invoices.items,
            returnUrl: query.return ?? null,
            language: requestLanguage(request),
            catalog: services.catalog,
          }),
        );
      },
      {
        auth: "session",
        query: t.Object({ return: ReturnParam }),
        response: { 200: HTML, ...PAGE_ERRORS },
        detail: {
          summary: "Local billing portal",
          description: "HTML page listing the organization's subscriptions and invoices.",
          tags: ["Billing pages"],
          operationId: "getLocalBillingPortal",
          security: SESSION,
        },
      },
    )
    .post(
      "/portal/subscriptions/:id/cancel",
      async ({ params, query, principal }) => {
        const canceled = await store.cancelSubscription(principal.organizationId, params.id, clock.now());
        if (canceled === null) {
          const current = (await store.listSubscriptions(principal.organizationId)).find((sub) => sub.id === params.id);
          if (current === undefined) throw NOT_FOUND;
        }
        return seeOther(`/billing/portal${query.return ? `?return=${encodeURIComponent(query.return)}` : ""}`);
      },
      {
        auth: "session",
        parse: "none",
        params: t.Object({ id: t.String({ maxLength: 100 }) }),
        query: t.Object({ return: ReturnParam }),
        response: { 303: SeeOther("the portal"), ...PAGE_ERRORS },
        detail: {
          summary: "Cancel a local subscription",
          description: "It renews no more; the current period's credits stay until the period ends. Canceling twice changes nothing.",
          tags: ["Billing pages"],
          operationId: "cancelLocalSubscription",
          security: SESSION,
        },
      },
    );
}
