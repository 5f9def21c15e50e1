import { Elysia } from "elysia";
import type { Services } from "../../services";
import { createEndpointRoute } from "./routes/create";
import { deleteEndpointRoute } from "./routes/delete";
import { listDeliveriesRoute } from "./routes/deliveries";
import { enableEndpointRoute } from "./routes/enable";
import { listEndpointsRoute } from "./routes/list";
import { readEndpointRoute } from "./routes/read";
import { rotateSecretRoute } from "./routes/rotate-secret";
import { webhookSettingsRoutes } from "./routes/settings";
import { testEventRoute } from "./routes/test-event";

/** Webhook endpoints of the signed-in user's organization and its low-credit threshold; session cookie only. */
export function webhookRoutes(services: Services) {
  return new Elysia({ name: "webhooks.routes", prefix: "/api/v1/customer/webhooks" })
    .use(webhookSettingsRoutes(services))
    .use(listEndpointsRoute(services))
    .use(createEndpointRoute(services))
    .use(readEndpointRoute(services))
    .use(deleteEndpointRoute(services))
    .use(rotateSecretRoute(services))
    .use(enableEndpointRoute(services))
    .use(testEventRoute(services))
    .use(listDeliveriesRoute(services));
}
