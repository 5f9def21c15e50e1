import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { KeyParams, ApiKeySchema } from "../model";
import { oneKeyJSON, revokeApiKey } from "../service";
import { NO_STORE, sessionErrors } from "./common";

/** POST /api/v1/customer/api-keys/:id/revoke. */
export function revokeKeyRoute(services: Services) {
  const { store, clock, logger } = services;

  return new Elysia({ name: "keys.revoke" }).use(authPlugin(services)).post(
    "/:id/revoke",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      const revoked = await revokeApiKey(store, { organizationId: session.organizationId, id: params.id, now: clock.now() });
      logger.info("api key revoked", { keyId: revoked.id, keyPrefix: revoked.keyPrefix, organizationId: session.organizationId, userId: session.userId });
      Object.assign(set.headers, NO_STORE);
      return oneKeyJSON(store, revoked, clock.now());
    },
    {
      auth: "session",
      params: KeyParams,
      response: { 200: ApiKeySchema, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema },
      detail: {
        summary: "Revoke an API key",
        description:
          "ACTIVE → REVOKED, permanently: any request with the key then gets 401. 409 invalid-key-state when the key is not ACTIVE; 404 for an unknown id or a key of another organization. Session cookie only.",
        tags: ["API keys"],
        operationId: "revokeApiKey",
        security: [{ session: [] }],
      },
    },
  );
}
