import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { WebhookSettingsSchema } from "../model";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** GET /api/v1/customer/webhooks/settings, PATCH /api/v1/customer/webhooks/settings. */
export function webhookSettingsRoutes(services: Services) {
  const { store, logger } = services;

  return new Elysia({ name: "webhooks.settings" })
    .use(authPlugin(services))
    .get(
      "/settings",
      async ({ principal, set }) => {
        const { organizationId } = sessionPrincipal(principal);
        Object.assign(set.headers, NO_STORE);
        return { lowCreditThreshold: await store.getLowCreditThreshold(organizationId) };
      },
      {
        auth: "session",
        response: { 200: WebhookSettingsSchema, ...sessionErrors },
        detail: {
          summary: "Read the organization's webhook settings",
          description: "The low-credit threshold of `credits.low`. Session cookie only.",
          tags: [TAG],
          operationId: "getWebhookSettings",
          security,
        },
      },
    )
    .patch(
      "/settings",
      async ({ body, principal, set }) => {
        const session = sessionPrincipal(principal);
        await store.setLowCreditThreshold(session.organizationId, body.lowCreditThreshold);
        logger.info("low-credit threshold changed", {
          organizationId: session.organizationId,
          userId: session.userId,
          lowCreditThreshold: body.lowCreditThreshold,
        });
        Object.assign(set.headers, NO_STORE);
        return { lowCreditThreshold: body.lowCreditThreshold };
      },
      {
        auth: "session",
        body: WebhookSettingsSchema,
        response: { 200: WebhookSettingsSchema, ...sessionErrors },
        detail: {
          summary: "Set the low-credit threshold",
          description:
            "`credits.low` is sent when a debit (a billed look-up, an expiry or a refund) takes the organization's balance (available + held by requests in flight) from at least `lowCreditThreshold` to below it; null: never. `credits.depleted` is sent when the balance reaches 0, whatever the threshold. Session cookie only.",
          tags: [TAG],
          operationId: "updateWebhookSettings",
          security,
        },
      },
    );
}
