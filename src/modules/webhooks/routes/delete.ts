import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams } from "../model";
import { deleteWebhookEndpoint } from "../service";
import { TAG, security, sessionErrors } from "./common";

/** DELETE /api/v1/customer/webhooks/:id. */
export function deleteEndpointRoute(services: Services) {
  const { store, logger } = services;

  return new Elysia({ name: "webhooks.delete" }).use(authPlugin(services)).delete(
    "/:id",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      await deleteWebhookEndpoint(store, { organizationId: session.organizationId, id: params.id });
      logger.info("webhook endpoint deleted", { endpointId: params.id, organizationId: session.organizationId, userId: session.userId });
      set.status = 204;
    },
    {
      auth: "session",
      params: EndpointParams,
      response: { 204: t.Void({ description: "Deleted, with its delivery log; nothing more is sent to it" }), ...sessionErrors, 404: ProblemSchema },
      detail: {
        summary: "Delete a webhook endpoint",
        description: "404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "deleteWebhookEndpoint",
        security,
      },
    },
  );
}
