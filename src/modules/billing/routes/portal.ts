import { applyIdempotentResult, IdempotencyKeyHeader, runIdempotent } from "../../../http/idempotency";
import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { authPlugin } from "../../auth/plugin";
import { PortalBody, PortalResponse } from "../model";
import { openPortal } from "../service";
import { WRITE_ERRORS, SESSION } from "./common";

/** POST /api/v1/customer/billing/portal. */
export function portalRoute(services: Services) {
  return new Elysia({ name: "billing.portal" }).use(authPlugin(services)).post(
    "/portal",
    async ({ principal, body, headers, set }) => {
      const result = await runIdempotent(
        services.store,
        {
          key: headers["idempotency-key"],
          organizationId: principal.organizationId,
          route: "POST /billing/portal",
          body: body ?? null,
          now: services.clock.now(),
        },
        () => openPortal(services, principal.organizationId, body ?? undefined),
      );
      return applyIdempotentResult(set, result);
    },
    {
      auth: "session",
      headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
      body: PortalBody,
      response: { 200: PortalResponse, ...WRITE_ERRORS },
      detail: {
        summary: "Open the billing portal",
        description: "Subscriptions (cancel) and invoices.",
        tags: ["Billing"],
        operationId: "openBillingPortal",
        security: SESSION,
      },
    },
  );
}
