import { Elysia, t } from "elysia";
import type { Services } from "../../../services";
import { applyIdempotentResult, IdempotencyKeyHeader, runIdempotent } from "../../../http/idempotency";
import { ProblemSchema } from "../../../http/model";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { CreatedKeySchema, CreateKeyBody } from "../model";
import { createApiKey, oneKeyJSON, parseKeyControls } from "../service";
import { maxKeyRateLimit } from "../../../http/rate-limit";
import { NO_STORE, sessionErrors } from "./common";

const CREATE_ROUTE = "POST /api/v1/customer/api-keys";

/** POST /api/v1/customer/api-keys. */
export function createKeyRoute(services: Services) {
  const { store, clock, config, logger } = services;
  const maxRateLimit = maxKeyRateLimit(config.rateLimit);

  return new Elysia({ name: "keys.create" }).use(authPlugin(services)).post(
    "",
    async ({ body, headers, principal, set }) => {
      const session = sessionPrincipal(principal);
      const create = async () => {
        const created = await createApiKey(store, {
          organizationId: session.organizationId,
          name: body.name,
          createdBy: session.userId,
          keyPrefix: config.keyPrefix,
          now: clock.now(),
          ...parseKeyControls(body, { now: clock.now(), maxRateLimit }),
        });
        logger.info("api key created", {
          keyId: created.key.id,
          keyPrefix: created.key.keyPrefix,
          organizationId: session.organizationId,
          userId: session.userId,
        });
        return { status: 201, body: { key: await oneKeyJSON(store, created.key, clock.now()), clearKey: created.clearKey } };
      };
      const result = await runIdempotent(
        store,
        { key: headers["idempotency-key"], organizationId: session.organizationId, route: CREATE_ROUTE, body, now: clock.now() },
        create,
      );
      Object.assign(set.headers, NO_STORE);
      return applyIdempotentResult(set, result);
    },
    {
      auth: "session",
      // Trim before validation, so the 1..100 rule applies to the name as it is stored.
      transform({ body }) {
        const candidate = body as { name?: unknown } | null;
        if (candidate !== null && typeof candidate === "object" && typeof candidate.name === "string") candidate.name = candidate.name.trim();
      },
      body: CreateKeyBody,
      headers: t.Object({ "idempotency-key": IdempotencyKeyHeader }),
      response: { 201: CreatedKeySchema, ...sessionErrors, 409: ProblemSchema },
      detail: {
        summary: "Create an API key",
        description:
          "Returns the new ACTIVE key and its secret `clearKey`, shown only here. Optional controls: `expiresAt`, `monthlyCreditLimit`, `rateLimit` (see PATCH). With an `Idempotency-Key` header, a retry with the same key and body within 24 h returns the same answer (same `clearKey`, no second key, header `Idempotent-Replayed: true`); the same key with another body is 422; while the first request is still running, 409. Session cookie only.",
        tags: ["API keys"],
        operationId: "createApiKey",
        security: [{ session: [] }],
      },
    },
  );
}
