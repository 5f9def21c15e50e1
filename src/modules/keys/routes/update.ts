import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { KeyParams, ApiKeySchema, UpdateKeyBody } from "../model";
import { oneKeyJSON, parseKeyControls, updateKeyControls } from "../service";
import { maxKeyRateLimit } from "../../../http/rate-limit";
import { NO_STORE, sessionErrors } from "./common";

/** PATCH /api/v1/customer/api-keys/:id. */
export function updateKeyRoute(services: Services) {
  const { store, clock, config, logger } = services;
  const maxRateLimit = maxKeyRateLimit(config.rateLimit);

  return new Elysia({ name: "keys.update" }).use(authPlugin(services)).patch(
    "/:id",
    async ({ params, body, principal, set }) => {
      const session = sessionPrincipal(principal);
      const controls = parseKeyControls(body, { now: clock.now(), maxRateLimit });
      const updated = await updateKeyControls(store, { organizationId: session.organizationId, id: params.id, controls });
      logger.info("api key controls changed", {
        keyId: updated.id,
        keyPrefix: updated.keyPrefix,
        organizationId: session.organizationId,
        userId: session.userId,
        fields: Object.keys(controls),
      });
      Object.assign(set.headers, NO_STORE);
      return oneKeyJSON(store, updated, clock.now());
    },
    {
      auth: "session",
      params: KeyParams,
      body: UpdateKeyBody,
      response: { 200: ApiKeySchema, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema },
      detail: {
        summary: "Change an API key's controls",
        description:
          "Sets `expiresAt` (a future date-time; from then on the key gets 401), `monthlyCreditLimit` (credits the key may spend per calendar month, UTC; at the limit its look-ups get 402 until the 1st of next month, and a limit lowered below what the key spent applies at once) and `rateLimit` (requests per second, at most the service's RATE_LIMIT, else 422). An absent field is kept; null clears it. 409 invalid-key-state when the key is not ACTIVE (a ROTATED key's controls live on in its replacement: change those); 404 for an unknown id or a key of another organization. Session cookie only.",
        tags: ["API keys"],
        operationId: "updateApiKey",
        security: [{ session: [] }],
      },
    },
  );
}
