import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { authPlugin } from "../../auth/plugin";
import { UsageQuery, UsageResponse } from "../model";
import { usageReport } from "../usage";
import { READ_ERRORS, SESSION_OR_KEY } from "./common";

/** GET /api/v1/customer/billing/usage. */
export function usageRoute(services: Services) {
  return new Elysia({ name: "billing.usage" })
    .use(authPlugin(services))
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
    });
}
