import { Elysia } from "elysia";
import type { Services } from "../../services";
import { createKeyRoute } from "./routes/create";
import { listKeysRoute } from "./routes/list";
import { revokeKeyRoute } from "./routes/revoke";
import { rotateKeyRoute } from "./routes/rotate";
import { updateKeyRoute } from "./routes/update";

/** Key management for the signed-in user's organization; session cookie only (docs/api.md). */
export function keyRoutes(services: Services) {
  return new Elysia({ name: "keys.routes", prefix: "/api/v1/customer/api-keys" })
    .use(listKeysRoute(services))
    .use(createKeyRoute(services))
    .use(rotateKeyRoute(services))
    .use(updateKeyRoute(services))
    .use(revokeKeyRoute(services));
}
