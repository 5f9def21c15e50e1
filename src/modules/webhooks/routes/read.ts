import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams, WebhookEndpointSchema } from "../model";
import { endpointJSON, endpointOfOrganization } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** GET /api/v1/customer/webhooks/:id. */
export function readEndpointRoute(services: Services) {
  const { store } = services;

  return new Elysia({ name: "webhooks.read" }).use(authPlugin(services)).get(
    "/:id",
    async ({ params, principal, set }) => {
      const { organizationId } = sessionPrincipal(principal);
      Object.assign(set.headers, NO_STORE);
      return endpointJSON(await endpointOfOrganization(store, organizationId, params.id));
    },
    {
      auth: "session",
      params: EndpointParams,
      response: { 200: WebhookEndpointSchema, ...sessionErrors, 404: ProblemSchema },
      detail: {
        summary: "Read a webhook endpoint",
        description: "404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "getWebhookEndpoint",
        security,
      },
    },
  );
}
