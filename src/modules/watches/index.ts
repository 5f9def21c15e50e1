import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { CommonErrors, Problems, ProblemSchema } from "../../http/model";
import { authPlugin } from "../auth/plugin";
import { CreateWatchBody, WatchListQuery, WatchPageSchema, WatchParams, WatchSchema } from "./model";
import { createWatch, deleteWatch, watchJSON, watchOfOrganization } from "./service";

const NO_STORE = { "cache-control": "no-store" };
const TAG = "Price watches";
const security: Array<Record<string, string[]>> = [{ session: [] }, { apiKey: [] }];

const EVENT =
  "Each event is a `price.changed` webhook event, sent to the organization's webhook endpoints subscribed to `price.changed` (signed the Standard Webhooks way, retried) with `data` as the `PriceChangedEvent` schema: the watch (`watchId`, `gtin`, `merchant`, `trigger`, `below`) and the `previous` and `current` state (`merchant`, `price` in minor units, `availability`, `observedAt`). Each event costs `WATCH_EVENT_CREDIT_COST` credits (1 by default), debited with a usage ledger row (`Price watch event <GTIN>`, its `requestId` the event's id) in the transaction that writes the event. An organization that cannot pay gets no event: its watches are `paused` (`pausedReason` `insufficient-credits`) and resume once it has credits again (a purchase or a grant).";

/** The organization's price watches (docs/api.md, "Price watches"); session cookie or API key. */
export function watchRoutes(services: Services) {
  const { store, clock, config, logger } = services;
  const errors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema };

  return new Elysia({ name: "watches.routes", prefix: "/api/v1/customer/watches" })
    .use(authPlugin(services))
    .get(
      "",
      async ({ query, principal, set }) => {
        const page = await store.listWatches(principal.organizationId, { limit: query.limit ?? 20, after: query.cursor });
        Object.assign(set.headers, NO_STORE);
        return { items: page.items.map(watchJSON), nextCursor: page.nextCursor };
      },
      {
        auth: "sessionOrKey",
        query: WatchListQuery,
        response: { 200: WatchPageSchema, ...errors },
        detail: { summary: "List price watches", description: "The organization's watches, newest first.", tags: [TAG], operationId: "listWatches", security },
      },
    )
    .post(
      "",
      async ({ body, principal, set }) => {
        const watch = await createWatch(
          store,
          { organizationId: principal.organizationId, gtin: body.gtin, merchant: body.merchant, trigger: body.trigger, below: body.below, now: clock.now() },
          { limit: config.watchLimit, freshnessWindowMs: config.freshnessWindowMs },
        );
        logger.info("price watch created", { watchId: watch.id, organizationId: principal.organizationId, gtin: watch.gtin, trigger: watch.trigger });
        Object.assign(set.headers, NO_STORE);
        set.status = 201;
        return watchJSON(watch);
      },
      {
        auth: "sessionOrKey",
        body: CreateWatchBody,
        response: {
          201: WatchSchema,
          ...errors,
          400: Problems(["invalid-gtin", "invalid-parameter", "invalid-body"]),
          422: Problems(["unprocessable-body"]),
          409: Problems(["conflict"]),
        },
        detail: {
          summary: "Watch a product's price",
          description:
            "Watches one product (`gtin`, normalized to its GTIN-14; a product not known yet may be watched) and, with `merchant`, that merchant's offer only; without it, the product's best fresh price across merchants. An import of any kind (CLI, feed pull, directory scan, push) that changes what the watch sees fires it: `any-change` on any change of price or availability, `price-drop` when the price goes down, `below` when the price crosses under `below` (`amount` in minor units, same currency), once per crossing: it re-arms when the price is back at or above it. A watch starts from what it sees when it is made; re-importing the same data fires nothing. " +
            EVENT +
            " 400 invalid-gtin; 422 unprocessable-body when `below` is given without the trigger `below` or missing with it; 409 conflict past `WATCH_LIMIT` watches per organization (10,000 by default; the problem's `limit` says it).",
          tags: [TAG],
          operationId: "createWatch",
          security,
        },
      },
    )
    .get(
      "/:id",
      async ({ params, principal, set }) => {
        Object.assign(set.headers, NO_STORE);
        return watchJSON(await watchOfOrganization(store, principal.organizationId, params.id));
      },
      {
        auth: "sessionOrKey",
        params: WatchParams,
        response: { 200: WatchSchema, ...errors, 404: ProblemSchema },
        detail: {
          summary: "Read a price watch",
          description: "404 for an unknown id or a watch of another organization.",
          tags: [TAG],
          operationId: "getWatch",
          security,
        },
      },
    )
    .delete(
      "/:id",
      async ({ params, principal, set }) => {
        await deleteWatch(store, principal.organizationId, params.id);
        logger.info("price watch deleted", { watchId: params.id, organizationId: principal.organizationId });
        set.status = 204;
      },
      {
        auth: "sessionOrKey",
        params: WatchParams,
        response: { 204: t.Void({ description: "Deleted; it sends nothing more" }), ...errors, 404: ProblemSchema },
        detail: {
          summary: "Delete a price watch",
          description: "404 for an unknown id or a watch of another organization.",
          tags: [TAG],
          operationId: "deleteWatch",
          security,
        },
      },
    );
}
