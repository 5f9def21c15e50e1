import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { requestLanguage } from "../../../http/request";
import { authPlugin } from "../../auth/plugin";
import { InvoiceSchema, InvoicesQuery, pageOf } from "../model";
import { listInvoices } from "../service";
import { READ_ERRORS, SESSION_OR_KEY } from "./common";

/** GET /api/v1/customer/billing/invoices. */
export function invoicesRoute(services: Services) {
  return new Elysia({ name: "billing.invoices" })
    .use(authPlugin(services))
    .get("/invoices", ({ principal, query, request }) => listInvoices(services, principal.organizationId, query, requestLanguage(request)), {
      auth: "sessionOrKey",
      query: InvoicesQuery,
      response: { 200: pageOf(InvoiceSchema), ...READ_ERRORS },
      detail: {
        summary: "Invoices of the payment provider, newest first",
        description: "Paged with `limit` and `cursor`. Session cookie or API key.",
        tags: ["Billing"],
        operationId: "listBillingInvoices",
        security: SESSION_OR_KEY,
      },
    });
}
