import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { CommonErrors, ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { authPlugin, sessionPrincipal } from "../auth/plugin";
import { decodeDeliveryCursor } from "../../db/webhook-records";
import {
  CreateEndpointBody,
  DeliveryListQuery,
  DeliveryPageSchema,
  EndpointListQuery,
  EndpointPageSchema,
  EndpointParams,
  EndpointWithSecretSchema,
  TestEventSchema,
  WebhookEndpointSchema,
  WebhookSettingsSchema,
} from "./model";
import { checkWebhookURL, createWebhookEndpoint, deleteWebhookEndpoint, deliveryJSON, enableWebhookEndpoint, endpointJSON, endpointOfOrganization, rotateWebhookSecret, sendTestEvent } from "./service";

const NO_STORE = { "cache-control": "no-store" };
const TAG = "Webhook endpoints";
const security = [{ session: [] }];

/** Webhook endpoints of the signed-in user's organization and its low-credit threshold; session cookie only. */
export function webhookRoutes(services: Services) {
  const { store, clock, config, logger, webhookPolicy } = services;
  const sessionErrors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema };

  return new Elysia({ name: "webhooks.routes", prefix: "/api/v1/customer/webhooks" })
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
        detail: { summary: "Read the organization's webhook settings", description: "The low-credit threshold of `credits.low`. Session cookie only.", tags: [TAG], operationId: "getWebhookSettings", security },
      },
    )
    .patch(
      "/settings",
      async ({ body, principal, set }) => {
        const session = sessionPrincipal(principal);
        await store.setLowCreditThreshold(session.organizationId, body.lowCreditThreshold);
        logger.info("low-credit threshold changed", { organizationId: session.organizationId, userId: session.userId, lowCreditThreshold: body.lowCreditThreshold });
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
    )
    .get(
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
        detail: { summary: "List webhook endpoints", description: "Newest first; never includes a secret. Session cookie only.", tags: [TAG], operationId: "listWebhookEndpoints", security },
      },
    )
    .post(
      "",
      async ({ body, principal, set }) => {
        const session = sessionPrincipal(principal);
        const url = checkWebhookURL(body.url, { policy: webhookPolicy, development: config.env === "development" });
        const created = await createWebhookEndpoint(store, { organizationId: session.organizationId, url, eventTypes: body.eventTypes, now: clock.now() });
        logger.info("webhook endpoint created", { endpointId: created.endpoint.id, organizationId: session.organizationId, userId: session.userId, eventTypes: body.eventTypes });
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
    )
    .get(
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
        detail: { summary: "Read a webhook endpoint", description: "404 for an unknown id or an endpoint of another organization. Session cookie only.", tags: [TAG], operationId: "getWebhookEndpoint", security },
      },
    )
    .delete(
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
        detail: { summary: "Delete a webhook endpoint", description: "404 for an unknown id or an endpoint of another organization. Session cookie only.", tags: [TAG], operationId: "deleteWebhookEndpoint", security },
      },
    )
    .post(
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
    )
    .post(
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
    )
    .post(
      "/:id/test",
      async ({ params, principal, set }) => {
        const session = sessionPrincipal(principal);
        const eventId = await sendTestEvent(store, { organizationId: session.organizationId, id: params.id, now: clock.now() });
        set.status = 202;
        return { eventId };
      },
      {
        auth: "session",
        params: EndpointParams,
        response: { 202: TestEventSchema, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema },
        detail: {
          summary: "Send a test event",
          description:
            "Queues a `webhook.test` event for this endpoint only; it is delivered like any other (see its delivery log). 409 conflict when the endpoint is disabled; 404 for an unknown id or an endpoint of another organization. Session cookie only.",
          tags: [TAG],
          operationId: "sendWebhookTestEvent",
          security,
        },
      },
    )
    .get(
      "/:id/deliveries",
      async ({ params, query, principal, set }) => {
        const { organizationId } = sessionPrincipal(principal);
        await endpointOfOrganization(store, organizationId, params.id);
        if (query.cursor !== undefined && decodeDeliveryCursor(query.cursor) === null) {
          throw new Problem("invalid-parameter", { detail: { en: "cursor is not a cursor this service gave out.", fr: "cursor n'est pas un curseur fourni par ce service." } });
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
