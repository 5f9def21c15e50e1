import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { isLanguage, languageFromHeader } from "../../http/i18n";
import { Problem, type ProblemSlug } from "../../http/problem";
import { CommonErrors } from "../../http/model";
import { checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { PriceEnvelope, PriceProblem, type PriceMetaValue, type Reason } from "./model";
import { lookUpPrice, type PriceLookupResult } from "./service";
import { hashRequestBody, IdempotencyKeyHeader, type IdempotencyRecorder, withIdempotency } from "../../http/idempotency";
import { normalizeGTIN } from "./gtin";
import { rateLimitHeaders } from "../../http/rate-limit";

const PROBLEM_OF_STATUS: Record<number, ProblemSlug> = { 402: "insufficient-credits", 404: "product-not-found" };

export function productRoutes(services: Services) {
  const { store, clock, config, keyUsage, rateLimiter } = services;
  const policyOnly = rateLimitHeaders(rateLimiter, null);
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

      Object.assign(set.headers, policyOnly);
      const key = await checkBearerKey(request.headers.get("authorization"), store, config.keyPrefix);
      if (!key.ok) throw unauthorizedKey(key.detail, { meta: meta("unauthorized", params.gtin, 0) });
      const organizationId = key.credential.organizationId;

      if (query.language !== undefined && !isLanguage(query.language)) {
        throw new Problem(
          "invalid-parameter",
          { en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` },
          { meta: meta("invalid-parameter", params.gtin, await store.availableCredits(organizationId, clock.now())) },
        );
      }
      const language = query.language ?? languageFromHeader(request.headers.get("accept-language"));

      const gtin = normalizeGTIN(params.gtin);
      if (gtin === null) {
        throw new Problem("invalid-gtin", undefined, { meta: meta("invalid-gtin", params.gtin, await store.availableCredits(organizationId, clock.now())) });
      }

      const admission = rateLimiter.take(key.credential.id, clock.now());
      const limitHeaders = rateLimitHeaders(rateLimiter, admission);
      Object.assign(set.headers, limitHeaders);
      if (!admission.allowed) {
        throw new Problem(
          "rate-limited",
          { en: `Rate limit of ${rateLimiter.limit} requests per ${rateLimiter.windowSeconds} s exceeded; retry in ${admission.retryAfterSeconds} s.`, fr: `Limite de ${rateLimiter.limit} requêtes par ${rateLimiter.windowSeconds} s dépassée ; réessayez dans ${admission.retryAfterSeconds} s.` },
          { meta: meta("rate-limited", gtin, await store.availableCredits(organizationId, clock.now())) },
          limitHeaders,
        );
      }

      const answer = (result: PriceLookupResult) => {
        const resultMeta = meta(result.reason, result.gtin, result.creditsRemaining, result.creditsConsumed);
        if (result.status !== 200 || result.data === null) {
          throw new Problem(PROBLEM_OF_STATUS[result.status]!, undefined, { meta: resultMeta }, limitHeaders);
        }
        return { meta: resultMeta, data: result.data };
      };
      const respond = async (recorder?: IdempotencyRecorder) => {
        let sealed: ReturnType<typeof answer> | undefined;
        const result = await lookUpPrice(lookupDeps, {
          credential: key.credential,
          gtin,
          language,
          requestId,
          recordAnswer: recorder && (async (billed) => {
            sealed = answer(billed);
            return { scope: recorder.scope, keyHash: recorder.keyHash, responseStatus: 200, responseBody: await recorder.seal(sealed) };
          }),
        });
        return { status: 200, body: sealed ?? answer(result), recorded: sealed !== undefined };
      };

      const idempotencyKey = request.headers.get("idempotency-key");
      const { body, replayed } =
        idempotencyKey === null
          ? { ...(await respond()), replayed: false }
          : await withIdempotency(store, { scope: `${organizationId}:GET /products/price`, key: idempotencyKey, requestHash: hashRequestBody({ gtin, language }), now: clock.now() }, respond).catch(
              async (error: unknown) => {
                if (!(error instanceof Problem) || "meta" in error.extensions) throw error;
                const creditsRemaining = await store.availableCredits(organizationId, clock.now());
                throw new Problem(error.slug, error.detailText, { ...error.extensions, meta: meta("idempotency-conflict", gtin, creditsRemaining) }, error.headers, error.statusOverride);
              },
            );
      if (replayed) set.headers["idempotent-replayed"] = "true";
      keyUsage.record(key.credential.id, clock.now());
      return body;
    },
    {
      params: t.Object({ gtin: t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }) }),
      query: t.Object({
        language: t.Optional(t.String({ description: "Response language: `en` or `fr` (default: Accept-Language, then `en`)", examples: ["en"] })),
      }),
      headers: t.Object({
        authorization: t.Optional(t.String({ description: "Bearer <API_KEY>" })),
        "accept-language": t.Optional(t.String({ description: "Used when `language` is absent: en or fr" })),
        "idempotency-key": IdempotencyKeyHeader,
      }),
      response: {
        200: PriceEnvelope,
        ...CommonErrors,
        400: PriceProblem(["invalid-gtin", "invalid-parameter"]),
        401: PriceProblem(["unauthorized"]),
        402: PriceProblem(["insufficient-credits"]),
        404: PriceProblem(["product-not-found"]),
        409: PriceProblem(["conflict"]),
        422: PriceProblem(["invalid-body"]),
        429: PriceProblem(["rate-limited"]),
      },
      detail: {
        summary: "Fresh price offers for a product",
        description:
          "Billed in credits only for reason `fresh-offer`. Outcomes: 200 fresh-offer / no-data / stale-data, 400 invalid-gtin or invalid-parameter, 401 unauthorized, 402 insufficient-credits, 404 product-not-found, 429 rate-limited. Error bodies carry `meta`. With an `Idempotency-Key` header, a retry within 24 h with the same GTIN and language gets the stored answer (header `Idempotent-Replayed: true`) and is not billed again; the same key for another GTIN or language is 422; a retry while the first is in flight is 409. Only 200 answers are stored: an error answer can be retried with the same key.",
        tags: ["Products"],
        operationId: "getProductPrice",
        security: [{ apiKey: [] }],
      },
    },
  );
}
