import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { EndpointParams, TestEventSchema } from "../model";
import { sendTestEvent } from "../service";
import { TAG, security, sessionErrors } from "./common";

/** POST /api/v1/customer/webhooks/:id/test. */
export function testEventRoute(services: Services) {
  const { store, clock } = services;

  return new Elysia({ name: "webhooks.test-event" })
    .use(authPlugin(services))
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
    );
}
