import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { CreateEndpointBody, EndpointWithSecretSchema } from "../model";
import { checkWebhookURL, createWebhookEndpoint, endpointJSON } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** POST /api/v1/customer/webhooks. */
export function createEndpointRoute(services: Services) {
  const { store, clock, config, logger, outboundPolicy } = services;

  return new Elysia({ name: "webhooks.create" }).use(authPlugin(services)).post(
    "",
    async ({ body, principal, set }) => {
      const session = sessionPrincipal(principal);
      const url = checkWebhookURL(body.url, { policy: outboundPolicy, development: config.env === "development" });
      const created = await createWebhookEndpoint(store, { organizationId: session.organizationId, url, eventTypes: body.eventTypes, now: clock.now() });
      logger.info("webhook endpoint created", {
        endpointId: created.endpoint.id,
        organizationId: session.organizationId,
        userId: session.userId,
        eventTypes: body.eventTypes,
      });
      Object.assign(set.headers, NO_STORE);
      set.status = 201;
      return { endpoint: endpointJSON(created.endpoint), secret: created.secret };
    },
    {
      auth: "session",
      body: CreateEndpointBody,
      response: { 201: EndpointWithSecretSchema, ...sessionErrors, 422: ProblemSchema },
      detail: {
        summary: "Create a webhook endpoint",
        description:
          "Events of the listed types are POSTed to `url`, signed the Standard Webhooks way (`webhook-id`, `webhook-timestamp`, `webhook-signature`) with the returned `secret`, shown only here. `url` must be https and may not point at a loopback, link-local or private address (422). Session cookie only.",
        tags: [TAG],
        operationId: "createWebhookEndpoint",
        security,
      },
    },
  );
}
