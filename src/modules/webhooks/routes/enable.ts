import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams, WebhookEndpointSchema } from "../model";
import { enableWebhookEndpoint, endpointJSON } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** POST /api/v1/customer/webhooks/:id/enable. */
export function enableEndpointRoute(services: Services) {
  const { store, logger } = services;

  return new Elysia({ name: "webhooks.enable" }).use(authPlugin(services)).post(
    "/:id/enable",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      const endpoint = await enableWebhookEndpoint(store, { organizationId: session.organizationId, id: params.id });
      logger.info("webhook endpoint enabled", { endpointId: params.id, organizationId: session.organizationId, userId: session.userId });
      Object.assign(set.headers, NO_STORE);
      return endpointJSON(endpoint);
    },
    {
      auth: "session",
      params: EndpointParams,
      response: { 200: WebhookEndpointSchema, ...sessionErrors, 404: ProblemSchema },
      detail: {
        summary: "Enable a webhook endpoint again",
        description:
          "After the receiver is fixed: the endpoint is enabled with a fresh failing streak, its deliveries still pending resume at their next try, and new events are queued for it again (those of the time it was disabled are not). Enabling an enabled endpoint changes nothing. 404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "enableWebhookEndpoint",
        security,
      },
    },
  );
}
