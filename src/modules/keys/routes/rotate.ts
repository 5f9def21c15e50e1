import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { CreatedKeySchema, KeyParams } from "../model";
import { oneKeyJSON, rotateApiKey } from "../service";
import { NO_STORE, sessionErrors } from "./common";

/** POST /api/v1/customer/api-keys/:id/rotate. */
export function rotateKeyRoute(services: Services) {
  const { store, clock, config, logger } = services;

  return new Elysia({ name: "keys.rotate" }).use(authPlugin(services)).post(
    "/:id/rotate",
    async ({ params, principal, set }) => {
      const session = sessionPrincipal(principal);
      const rotated = await rotateApiKey(store, {
        organizationId: session.organizationId,
        id: params.id,
        createdBy: session.userId,
        keyPrefix: config.keyPrefix,
        now: clock.now(),
      });
      logger.info("api key rotated", {
        keyId: params.id,
        replacementId: rotated.key.id,
        keyPrefix: rotated.key.keyPrefix,
        organizationId: session.organizationId,
        userId: session.userId,
      });
      Object.assign(set.headers, NO_STORE);
      return { key: await oneKeyJSON(store, rotated.key, clock.now()), clearKey: rotated.clearKey };
    },
    {
      auth: "session",
      params: KeyParams,
      response: { 200: CreatedKeySchema, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema },
      detail: {
        summary: "Rotate an API key",
        description:
          "The key becomes ROTATED (its secret stops working at once, `replacedBy` names the new key) and a new ACTIVE key of the same name is returned with its `clearKey`; the new key keeps the controls (`expiresAt`, `monthlyCreditLimit`, `rateLimit`) and the credits spent this month. The controls are copied in the rotation's own write: a PATCH answered 200 before it is carried over, one that comes after it is 409. 409 invalid-key-state when the key is not ACTIVE; 404 for an unknown id or a key of another organization. Session cookie only.",
        tags: ["API keys"],
        operationId: "rotateApiKey",
        security: [{ session: [] }],
      },
    },
  );
}
