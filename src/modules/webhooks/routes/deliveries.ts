import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { Problem } from "../../../http/problem";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { decodeDeliveryCursor } from "../../../db/webhooks/records";
import { DeliveryListQuery, DeliveryPageSchema, EndpointParams } from "../model";
import { deliveryJSON, endpointOfOrganization } from "../service";
import { NO_STORE, TAG, security, sessionErrors } from "./common";

/** GET /api/v1/customer/webhooks/:id/deliveries. */
export function listDeliveriesRoute(services: Services) {
  const { store } = services;

  return new Elysia({ name: "webhooks.deliveries" }).use(authPlugin(services)).get(
    "/:id/deliveries",
    async ({ params, query, principal, set }) => {
      const { organizationId } = sessionPrincipal(principal);
      await endpointOfOrganization(store, organizationId, params.id);
      if (query.cursor !== undefined && decodeDeliveryCursor(query.cursor) === null) {
        throw new Problem("invalid-parameter", {
          detail: { en: "cursor is not a cursor this service gave out.", fr: "cursor n'est pas un curseur fourni par ce service." },
        });
      }
      const page = await store.listWebhookDeliveries(params.id, { limit: query.limit ?? 20, after: query.cursor });
      Object.assign(set.headers, NO_STORE);
      return { items: page.items.map(deliveryJSON), nextCursor: page.nextCursor };
    },
    {
      auth: "session",
      params: EndpointParams,
      query: DeliveryListQuery,
      response: { 200: DeliveryPageSchema, ...sessionErrors, 404: ProblemSchema },
      detail: {
        summary: "List an endpoint's deliveries",
        description:
          "The delivery log, newest event first: each event with its attempts, last status, a short excerpt of the last response and the next try. Failed attempts are retried with exponential back-off over about a day (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h); an endpoint failing for a day is disabled. 404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "listWebhookDeliveries",
        security,
      },
    },
  );
}
