import { applyIdempotentResult, IdempotencyKeyHeader, runIdempotent } from "../../../http/idempotency";
import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { authPlugin } from "../../auth/plugin";
import type { Principal } from "../../auth/guard";
import { CheckoutResponse, PackCheckoutBody, SubscriptionCheckoutBody } from "../model";
import { startPackCheckout, startSubscriptionCheckout } from "../service";
import { WRITE_ERRORS, SESSION } from "./common";

function buyer(principal: Principal): { organizationId: string; userId: string | null } {
  return { organizationId: principal.organizationId, userId: principal.kind === "session" ? principal.userId : null };
}

/** POST /api/v1/customer/billing/checkout/pack, POST /api/v1/customer/billing/checkout/subscription. */
export function checkoutRoutes(services: Services) {
  return new Elysia({ name: "billing.checkout" })
    .use(authPlugin(services))
    .post(
      "/checkout/pack",
      async ({ principal, body, headers, set }) => {
        const result = await runIdempotent(
          services.store,
          {
            key: headers["idempotency-key"],
            organizationId: principal.organizationId,
            route: "POST /billing/checkout/pack",
            body: body ?? null,
            now: services.clock.now(),
          },
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
          {
            key: headers["idempotency-key"],
            organizationId: principal.organizationId,
            route: "POST /billing/checkout/subscription",
            body: body ?? null,
            now: services.clock.now(),
          },
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
    );
}
