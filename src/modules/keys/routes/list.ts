import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { authPlugin, sessionPrincipal } from "../../auth/plugin";
import { KeyListQuery, KeyPageSchema } from "../model";
import { keysJSON } from "../service";
import { NO_STORE, sessionErrors } from "./common";

/** GET /api/v1/customer/api-keys. */
export function listKeysRoute(services: Services) {
  const { store, clock } = services;

  return new Elysia({ name: "keys.list" }).use(authPlugin(services)).get(
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
  );
}
