import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { Problems, ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams, TestEventSchema } from "../model";
import { createTestEventLimiter, sendTestEvent } from "../service";
import { TAG, security, sessionErrors } from "./common";

/** POST /api/v1/customer/webhooks/:id/test. */
export function testEventRoute(services: Services) {
  const { store, clock } = services;
  const testEvents = createTestEventLimiter();

  return new Elysia({ name: "webhooks.test-event" }).use(authPlugin(services)).post(
    "/:id/test",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      const eventId = await sendTestEvent(store, testEvents, { organizationId: session.organizationId, id: params.id, now: clock.now() });
      set.status = 202;
      return { eventId };
    },
    {
      auth: "session",
      params: EndpointParams,
      response: { 202: TestEventSchema, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema, 429: Problems(["rate-limited"]) },
      detail: {
        summary: "Send a test event",
        description:
          "Queues a `webhook.test` event for this endpoint only; it is delivered like any other (see its delivery log). An organization may queue 10 test events per minute (bursts of up to 20): past that, 429 rate-limited with Retry-After. An endpoint keeps at most 10 000 pending deliveries: past that, the oldest are failed within a minute (shown as dropped in the log). 409 conflict when the endpoint is disabled; 404 for an unknown id or an endpoint of another organization. Session cookie only.",
        tags: [TAG],
        operationId: "sendWebhookTestEvent",
        security,
      },
    },
  );
}
