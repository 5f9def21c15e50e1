import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { isLanguage, languageFromHeader } from "../../http/i18n";
import { Problem, type ProblemSlug } from "../../http/problem";
import { CommonErrors } from "../../http/model";
import { checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { PriceEnvelope, PriceProblem, type PriceMetaValue, type Reason } from "./model";
import { lookUpPrice } from "./service";

const PROBLEM_OF_STATUS: Record<number, ProblemSlug> = { 400: "invalid-gtin", 402: "insufficient-credits", 404: "product-not-found" };

export function productRoutes(services: Services) {
  const { store, clock, config, keyUsage } = services;
  const lookupDeps = { store, clock, creditCost: config.creditCost, freshnessWindowMs: config.freshnessWindowMs };

  return new Elysia({ name: "products", prefix: "/api/v1/products" }).get(
    "/:gtin/price",
    async ({ params, query, request, set }) => {
      const startedAt = performance.now();
      const requestId = String(set.headers["x-request-id"]);
      const meta = (reason: Reason, gtin: string, creditsRemaining: number, creditsConsumed = 0): PriceMetaValue => ({
        requestId,
        gtin,
        facet: "product.price",
        billable: creditsConsumed > 0,
        creditsConsumed,
        creditsRemaining,
        reason,
        responseTimeMs: Math.round(performance.now() - startedAt),
      });

      const key = await checkBearerKey(request.headers.get("authorization"), store, config.keyPrefix);
      if (!key.ok) throw unauthorizedKey(key.detail, { meta: meta("unauthorized", params.gtin, 0) });

      if (query.language !== undefined && !isLanguage(query.language)) {
        const creditsRemaining = await store.availableCredits(key.credential.organizationId, clock.now());
        throw new Problem(
          "invalid-parameter",
          { en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` },
          { meta: meta("invalid-parameter", params.gtin, creditsRemaining) },
        );
      }
      const language = query.language ?? languageFromHeader(request.headers.get("accept-language"));

      const result = await lookUpPrice(lookupDeps, { credential: key.credential, rawGTIN: params.gtin, language, requestId });
      const resultMeta = meta(result.reason, result.gtin, result.creditsRemaining, result.creditsConsumed);
      if (result.status !== 200 || result.data === null) {
        throw new Problem(PROBLEM_OF_STATUS[result.status]!, undefined, { meta: resultMeta });
      }
      keyUsage.record(key.credential.id, clock.now());
      return { meta: resultMeta, data: result.data };
    },
    {
      params: t.Object({ gtin: t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }) }),
      query: t.Object({
        language: t.Optional(t.String({ description: "Response language: `en` or `fr` (default: Accept-Language, then `en`)", examples: ["en"] })),
      }),
      headers: t.Object({ authorization: t.Optional(t.String({ description: "Bearer <API_KEY>" })) }),
      response: {
        200: PriceEnvelope,
        ...CommonErrors,
        400: PriceProblem(["invalid-gtin", "invalid-parameter"]),
        401: PriceProblem(["unauthorized"]),
        402: PriceProblem(["insufficient-credits"]),
        404: PriceProblem(["product-not-found"]),
        429: PriceProblem(["rate-limited"]),
      },
      detail: {
        summary: "Fresh price offers for a product",
        description:
          "Billed in credits only for reason `fresh-offer`. Outcomes: 200 fresh-offer / no-data / stale-data, 400 invalid-gtin or invalid-parameter, 401 unauthorized, 402 insufficient-credits, 404 product-not-found, 429 rate-limited. Error bodies carry `meta`.",
        tags: ["Products"],
        operationId: "getProductPrice",
        security: [{ apiKey: [] }],
      },
    },
  );
}
