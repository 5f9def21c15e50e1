import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { CommonErrors } from "../../http/model";
import { parseJSONAfterAuthentication } from "../../http/authentication-first";
import { bearerKey, type KeyRefusal } from "../keys/bearer";
import { admit, priceRateLimits } from "./admit";
import { problemMeta, priceCall, priceLookupDeps, refusal, type SingleAnswer, type BatchAnswer, writePriceAnswer } from "./answer";
import { normalizeGTIN } from "./gtin";
import { lookUp } from "./look-up";
import { BatchBody, BatchEnvelope, BatchProblem, LookupHeaders, lookupErrors, PriceEnvelopeUnchecked, PriceProblem } from "./model";
import { parseBatchLookup, parseSingleLookup } from "./parse";

/**
 * The price look-ups, single and batch: key (the bearerKey plugin, before any other check), the
 * request's checks, rate limits, the look-up under its Idempotency-Key, the answer. A refusal at
 * any step is answered with the request's `meta` and counted under its reason.
 */
export function productRoutes(services: Services) {
  const deps = priceLookupDeps(services);
  const limits = priceRateLimits(services);
  const refusedKey = (route: "single" | "batch"): KeyRefusal => ({
    headers: limits.policyHeaders[route === "single" ? "requests" : "items"],
    meta: ({ params, requestId }) => {
      const gtin = params.gtin === undefined ? "" : (normalizeGTIN(params.gtin) ?? params.gtin);
      return problemMeta({ route, requestId, gtin, startedAt: performance.now() }, "unauthorized", 0);
    },
  });

  return new Elysia({ name: "products", prefix: "/api/v1/products" })
    .use(bearerKey(services))
    .get(
      "/:gtin/price",
      // A fresh answer is UTF-8 bytes with their content type, sent as is (the 200 schema is documentation only).
      async ({ key, params, query, request, set }) => {
        const call = priceCall(services, deps, key, { request, set }, params.gtin);
        try {
          const lookup = parseSingleLookup(params.gtin, query, request);
          set.headers["content-language"] = lookup.language;
          const limitHeaders = await admit(limits, key, lookup, set);
          return writePriceAnswer(call, await lookUp(call, lookup, limitHeaders), set) as SingleAnswer;
        } catch (error) {
          throw await refusal(call, error, set);
        }
      },
      {
        bearerKey: refusedKey("single"),
        params: t.Object({ gtin: t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }) }),
        // Documented here, checked by parseSingleLookup (noValidate): a bad value is a 400 with the request's meta.
        query: t.Object(
          { language: t.Optional(t.String({ description: "Response language: `en` or `fr` (default: Accept-Language, then `en`)", examples: ["en"] })) },
          { noValidate: true },
        ),
        headers: LookupHeaders,
        response: {
          // Documented, not checked per request: the handler builds the 200 body from typed parts.
          200: PriceEnvelopeUnchecked,
          ...CommonErrors,
          ...lookupErrors(PriceProblem),
        },
        detail: {
          summary: "Fresh price offers for a product",
          description:
            "Billed in credits only for reason `fresh-offer`. Outcomes: 200 fresh-offer / no-data / stale-data, 400 invalid-gtin or invalid-parameter, 401 unauthorized (also for a key past its `expiresAt`), 402 insufficient-credits (the organization's balance, or the key's `monthlyCreditLimit` for the current UTC month: the detail names the limit and its reset), 404 product-not-found, 429 rate-limited (by the key's own `rateLimit` when it has one, shown in RateLimit-Policy as `\"key\"`, or by the organization's limit on all of its keys together, `\"organization\"`), 503 unavailable when the debit could not be recorded (nothing billed, the credits are free again, retry). Error bodies carry `meta`. With an `Idempotency-Key` header, a retry within 24 h with the same GTIN and language gets the stored answer (header `Idempotent-Replayed: true`) and is not billed again; the same key for another GTIN or language is 422 `unprocessable-body`; a retry while the first is in flight is 409. Only 200 answers are stored: an error answer can be retried with the same key.",
          tags: ["Products"],
          operationId: "getProductPrice",
          security: [{ apiKey: [] }],
        },
      },
    )
    .post(
      "/prices",
      // Written as UTF-8 around each product's `data` serialized once (the 200 schema is documentation only).
      async ({ key, body, request, set }) => {
        const call = priceCall(services, deps, key, { request, set });
        try {
          const lookup = parseBatchLookup(body, request);
          set.headers["content-language"] = lookup.language;
          const limitHeaders = await admit(limits, key, lookup, set);
          return writePriceAnswer(call, await lookUp(call, lookup, limitHeaders), set) as BatchAnswer;
        } catch (error) {
          throw await refusal(call, error, set);
        }
      },
      {
        bearerKey: refusedKey("batch"),
        // A body that is not JSON waits for the key (its problem is deferred), and the handler sees null.
        parse: parseJSONAfterAuthentication,
        body: BatchBody,
        headers: LookupHeaders,
        response: {
          200: BatchEnvelope,
          ...CommonErrors,
          400: BatchProblem(["invalid-parameter", "invalid-body"]),
          401: BatchProblem(["unauthorized"]),
          402: BatchProblem(["insufficient-credits"]),
          409: BatchProblem(["conflict"]),
          422: BatchProblem(["unprocessable-body"]),
          429: BatchProblem(["rate-limited"]),
          503: BatchProblem(["unavailable"]),
        },
        detail: {
          summary: "Fresh price offers for up to 100 products",
          description:
            "The single look-up for 1 to 100 GTINs at once: one item per GTIN asked, in the order asked, each with its normalized `gtin`, its `reason` and either the single look-up's `data` (`fresh-offer`, `no-data`, `stale-data`) or a `problem` (`invalid-gtin`, `product-not-found`). Billing: `CREDIT_COST` credits for every distinct well-formed GTIN are reserved up front in one step; the distinct `fresh-offer` GTINs are debited together in one transaction (one usage ledger row for the request: `gtin` when one GTIN was billed, else null and the description `Price look-ups of N GTINs`) and the rest is given back. A GTIN asked twice (in any of its forms) is billed once, so a batch never costs more than `CREDIT_COST` × its distinct well-formed GTINs. When that reservation cannot be made (the balance, or the key's `monthlyCreditLimit`) the whole batch is 402 `insufficient-credits` and nothing is looked up or billed: a partial batch is never served. Rate limiting counts items (every GTIN asked), shown as `qu=\"items\"` in RateLimit-Policy. 401, 429 and the other refusals are as on the single look-up, with the batch's `meta` (its `reason` says why the whole batch was refused); a body that is not 1 to 100 GTIN strings is 422 `unprocessable-body`, after authentication. `Idempotency-Key`: a retry within 24 h with the same GTIN list and language gets the stored answer (`Idempotent-Replayed: true`), not billed again; another list with the same key is 422; a retry while the first is in flight is 409.",
          tags: ["Products"],
          operationId: "getProductPrices",
          security: [{ apiKey: [] }],
        },
      },
    );
}
