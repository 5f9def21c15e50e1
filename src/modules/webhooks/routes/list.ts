import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointListQuery, EndpointPageSchema } from "../model";
import { endpointJSON } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** GET /api/v1/customer/webhooks. */
export function listEndpointsRoute(services: Services) {
  const { store } = services;

  return new Elysia({ name: "webhooks.list" }).use(authPlugin(services)).get(
    "",
    async ({ query, principal, set }) => {
      const { organizationId } = sessionPrincipal(principal);
      const page = await store.listWebhookEndpoints(organizationId, { limit: query.limit ?? 20, after: query.cursor });
      Object.assign(set.headers, NO_STORE);
      return { items: page.items.map(endpointJSON), nextCursor: page.nextCursor };
    },
    {
      auth: "session",
      query: EndpointListQuery,
      response: { 200: EndpointPageSchema, ...sessionErrors },
      detail: {
        summary: "List webhook endpoints",
        description: "Newest first; never includes a secret. Session cookie only.",
        tags: [TAG],
        operationId: "listWebhookEndpoints",
        security,
      },
    },
  );
}
