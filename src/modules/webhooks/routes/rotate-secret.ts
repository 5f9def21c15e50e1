import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams, EndpointWithSecretSchema } from "../model";
import { endpointJSON, rotateWebhookSecret } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** POST /api/v1/customer/webhooks/:id/rotate-secret. */
export function rotateSecretRoute(services: Services) {
  const { store, clock, logger } = services;

  return new Elysia({ name: "webhooks.rotate-secret" }).use(authPlugin(services)).post(
    "/:id/rotate-secret",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      const rotated = await rotateWebhookSecret(store, { organizationId: session.organizationId, id: params.id, now: clock.now() });
      logger.info("webhook secret rotated", { endpointId: params.id, organizationId: session.organizationId, userId: session.userId });
      Object.assign(set.headers, NO_STORE);
      return { endpoint: endpointJSON(rotated.endpoint), secret: rotated.secret };
    },
    {
      auth: "session",
      params: EndpointParams,
      response: { 200: EndpointWithSecretSchema, ...sessionErrors, 404: ProblemSchema },
      detail: {
        summary: "Rotate a webhook endpoint's signing secret",
        description:
          "Returns the new secret, shown only here. For 24 hours deliveries carry two signatures in `webhook-signature`, one per secret, so a receiver can switch at its own pace. 404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "rotateWebhookSecret",
        security,
      },
    },
  );
}
