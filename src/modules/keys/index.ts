import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { applyIdempotentResult, IdempotencyKeyHeader, runIdempotent } from "../../http/idempotency";
import { CommonErrors, ProblemSchema } from "../../http/model";
import { authPlugin, sessionPrincipal } from "../auth/plugin";
import { CreatedKeySchema, CreateKeyBody, KeyListQuery, KeyPageSchema, KeyParams, ApiKeySchema, UpdateKeyBody } from "./model";
import { createApiKey, keysJSON, oneKeyJSON, parseKeyControls, revokeApiKey, rotateApiKey, updateKeyControls } from "./service";
import { maxKeyRateLimit } from "../../http/rate-limit";

const CREATE_ROUTE = "POST /api/v1/customer/api-keys";
const NO_STORE = { "cache-control": "no-store" };

/** Key management for the signed-in user's organization; session cookie only (docs/api.md). */
export function keyRoutes(services: Services) {
  const { store, clock, config, logger } = services;
  const sessionErrors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema };
  const maxRateLimit = maxKeyRateLimit(config.rateLimit);

  return new Elysia({ name: "keys.routes", prefix: "/api/v1/customer/api-keys" })
    .use(authPlugin(services))
    .get(
      "",
      async ({ query, principal, set }) => {
        const { organizationId } = sessionPrincipal(principal);
        const page = await store.listApiKeys(organizationId, { limit: query.limit ?? 20, after: query.cursor });
        Object.assign(set.headers, NO_STORE);
        return { items: await keysJSON(store, page.items, clock.now()), nextCursor: page.nextCursor };
      },
      {
        auth: "session",
        query: KeyListQuery,
        response: { 200: KeyPageSchema, ...sessionErrors },
        detail: {
          summary: "List the organization's API keys",
          description: "Newest first, every state (ACTIVE, ROTATED, REVOKED). Never includes a secret or its hash. Session cookie only.",
          tags: ["API keys"],
          operationId: "listApiKeys",
          security: [{ session: [] }],
        },
      },
    )
    .post(
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
          logger.info("api key created", { keyId: created.key.id, keyPrefix: created.key.keyPrefix, organizationId: session.organizationId, userId: session.userId });
          return { status: 201, body: { key: await oneKeyJSON(store, created.key, clock.now()), clearKey: created.clearKey } };
        };
        const result = await runIdempotent(store, { key: headers["idempotency-key"], organizationId: session.organizationId, route: CREATE_ROUTE, body, now: clock.now() }, create);
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
    )
    .post(
      "/:id/rotate",
      async ({ params, principal, set }) => {
        const session = sessionPrincipal(principal);
        const rotated = await rotateApiKey(store, { organizationId: session.organizationId, id: params.id, createdBy: session.userId, keyPrefix: config.keyPrefix, now: clock.now() });
        logger.info("api key rotated", { keyId: params.id, replacementId: rotated.key.id, keyPrefix: rotated.key.keyPrefix, organizationId: session.organizationId, userId: session.userId });
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
    )
    .patch(
      "/:id",
      async ({ params, body, principal, set }) => {
        const session = sessionPrincipal(principal);
        const controls = parseKeyControls(body, { now: clock.now(), maxRateLimit });
        const updated = await updateKeyControls(store, { organizationId: session.organizationId, id: params.id, controls });
        logger.info("api key controls changed", { keyId: updated.id, keyPrefix: updated.keyPrefix, organizationId: session.organizationId, userId: session.userId, fields: Object.keys(controls) });
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
    )
    .post(
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
