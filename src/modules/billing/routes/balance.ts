import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { authPlugin } from "../../auth/plugin";
import { BalanceResponse } from "../model";
import { getBalance } from "../service";
import { READ_ERRORS, SESSION_OR_KEY } from "./common";

/** GET /api/v1/customer/billing/balance. */
export function balanceRoute(services: Services) {
  return new Elysia({ name: "billing.balance" }).use(authPlugin(services)).get("/balance", ({ principal }) => getBalance(services, principal.organizationId), {
    auth: "sessionOrKey",
    response: { 200: BalanceResponse, ...READ_ERRORS },
    detail: {
      summary: "Credit balance and buckets",
      description: "Credits past their expiry are never counted as available, even before the expiry job has written them off.",
      tags: ["Billing"],
      operationId: "getBillingBalance",
      security: SESSION_OR_KEY,
    },
  });
}
