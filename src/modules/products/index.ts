import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { isLanguage, languageFromHeader } from "../../http/i18n";
import { Value } from "@sinclair/typebox/value";
import { Problem, type ProblemSlug } from "../../http/problem";
import { repeatedQueryParameter } from "../../http/request";
import { repeatedParameter, type Texts } from "../../http/validation";
import { CommonErrors } from "../../http/model";
import { checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { PriceEnvelopeUnchecked, PriceProblem, type PriceDataValue, type PriceMetaValue, type Reason } from "./model";
import { lookUpPrice, type PriceLookupResult } from "./service";
import { hashRequestBody, IdempotencyKeyHeader, type IdempotencyRecorder, withIdempotency } from "../../http/idempotency";
import { normalizeGTIN } from "./gtin";
import { keyRateLimitPolicy, rateLimitHeaders } from "../../http/rate-limit";
import { nextUTCMonthStart, toISO } from "../../lib/clock";
import { noteBillingMeta } from "../../http/observability";

const PROBLEM_OF_STATUS: Record<number, ProblemSlug> = { 402: "insufficient-credits", 404: "product-not-found", 503: "unavailable" };
const DEBIT_FAILED = {
  en: "The debit for this look-up could not be recorded, so it was not billed and its credits are free again; retry in a moment.",
  fr: "Le débit de cette consultation n'a pas pu être enregistré : elle n'est pas facturée et ses crédits sont de nouveau disponibles ; réessayez dans un instant.",
};

/** The 402 of a key at its monthly credit limit: the limit and when it resets (the 1st of next month, UTC). */
function keyLimitReached(limit: number, now: number): Texts {
  const resetsAt = toISO(nextUTCMonthStart(now));
  return {
    en: `This API key reached its monthly credit limit of ${limit} credits; it resets at ${resetsAt}. The organization's other keys are not affected.`,
    fr: `Cette clé d'API a atteint sa limite mensuelle de ${limit} crédits ; elle se renouvelle le ${resetsAt}. Les autres clés de l'organisation ne sont pas concernées.`,
  };
}

export function productRoutes(services: Services) {
  const { store, clock, config, keyUsage, usageCounters, rateLimiter } = services;
  const policyOnly = rateLimitHeaders(rateLimiter, null);
  const lookupDeps = { store, clock, lookups: services.lookups, creditCost: config.creditCost, freshnessWindowMs: config.freshnessWindowMs };

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
      const key = await checkBearerKey(request.headers.get("authorization"), store, config.keyPrefix, clock.now());
      if (!key.ok) throw unauthorizedKey(key.detail, { meta: meta("unauthorized", params.gtin, 0) });
      const organizationId = key.credential.organizationId;
      // Every answer to a known key counts in the usage counters under its reason (billed ones in the debit's transaction).
      const countUsage = (reason: string) => usageCounters.record(organizationId, key.credential.id, reason, clock.now());
      try {

        // The route's query and headers are checked here, after authentication (CONTRACT order), so their problems carry meta.
        const invalidParameter = async (detail: Texts) =>
          new Problem("invalid-parameter", detail, { meta: meta("invalid-parameter", params.gtin, await store.availableCredits(organizationId, clock.now())) });
        const repeated = repeatedQueryParameter(request.url);
        if (repeated !== null) throw await invalidParameter(repeatedParameter(repeated));
        if (query.language !== undefined && !isLanguage(query.language)) {
          throw await invalidParameter({ en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` });
        }
        const idempotencyKey = request.headers.get("idempotency-key");
        if (idempotencyKey !== null && !Value.Check(IdempotencyKeyHeader, idempotencyKey)) {
          throw await invalidParameter({ en: "Idempotency-Key must be 1 to 255 visible ASCII characters.", fr: "Idempotency-Key doit comporter de 1 à 255 caractères ASCII visibles." });
        }
        const language = query.language ?? languageFromHeader(request.headers.get("accept-language"));

        const gtin = normalizeGTIN(params.gtin);
        if (gtin === null) {
          throw new Problem("invalid-gtin", undefined, { meta: meta("invalid-gtin", params.gtin, await store.availableCredits(organizationId, clock.now())) });
        }

        // A key with a rate limit of its own is counted, and its headers shown, by that quota.
        const policy = key.credential.rateLimit === null ? rateLimiter.policy : keyRateLimitPolicy(key.credential.rateLimit);
        const admission = rateLimiter.take(key.credential.id, clock.now(), policy);
        const limitHeaders = rateLimitHeaders(rateLimiter, admission, policy);
        Object.assign(set.headers, limitHeaders);
        if (!admission.allowed) {
          throw new Problem(
            "rate-limited",
            { en: `Rate limit of ${policy.limit} requests per ${policy.windowSeconds} s exceeded; retry in ${admission.retryAfterSeconds} s.`, fr: `Limite de ${policy.limit} requêtes par ${policy.windowSeconds} s dépassée ; réessayez dans ${admission.retryAfterSeconds} s.` },
            { meta: meta("rate-limited", gtin, await store.availableCredits(organizationId, clock.now())) },
            limitHeaders,
          );
        }

        /** The meta of a 200 answer; any other outcome throws its problem. */
        const answerMeta = (result: PriceLookupResult): PriceMetaValue => {
          const resultMeta = meta(result.reason, result.gtin, result.creditsRemaining, result.creditsConsumed);
          if (result.status !== 200 || result.data === null) {
            if (result.status === 503) throw new Problem("unavailable", DEBIT_FAILED, { meta: resultMeta }, { ...limitHeaders, "retry-after": "1" });
            const detail = result.keyLimit === undefined ? undefined : keyLimitReached(result.keyLimit, clock.now());
            throw new Problem(PROBLEM_OF_STATUS[result.status]!, detail, { meta: resultMeta }, limitHeaders);
          }
          return resultMeta;
        };
        const answer = (result: PriceLookupResult) => ({ meta: answerMeta(result), data: result.data! });
        const respond = async (recorder?: IdempotencyRecorder) => {
          let sealed: ReturnType<typeof answer> | undefined;
          const result = await lookUpPrice(lookupDeps, {
            credential: key.credential,
            gtin,
            language,
            requestId,
            recordAnswer: recorder && (async (billed) => {
              sealed = answer(billed);
              return { scope: recorder.scope, keyHash: recorder.keyHash, claimedAt: recorder.claimedAt, responseStatus: 200, responseBody: await recorder.seal(sealed) };
            }),
          });
          // The sealed answer stands only if its debit committed; otherwise `answer` throws the 503.
          const billed = sealed !== undefined && result.creditsConsumed > 0;
          return { status: 200, body: billed ? sealed! : answer(result), recorded: billed };
        };

        if (idempotencyKey === null) {
          // The common case, answered as text: the product's `data` was serialized once (see readOffers),
          // so only `meta` is serialized here; the schemas above document it (noValidate, like query and headers).
          const result = await lookUpPrice(lookupDeps, { credential: key.credential, gtin, language, requestId });
          const resultMeta = answerMeta(result);
          keyUsage.record(key.credential.id, clock.now());
          noteBillingMeta(request, resultMeta);
          countUsage(resultMeta.reason);
          set.headers["content-type"] = "application/json";
          // A string body with its content type: Elysia sends it as is (the 200 schema is documentation only).
          return `{"meta":${JSON.stringify(resultMeta)},"data":${result.dataJSON}}` as unknown as { meta: PriceMetaValue; data: PriceDataValue };
        }
        const { body, replayed } = await withIdempotency(store, { scope: `${organizationId}:GET /products/price`, key: idempotencyKey, requestHash: hashRequestBody({ gtin, language }), now: clock.now() }, respond).catch(
                async (error: unknown) => {
                  if (!(error instanceof Problem) || "meta" in error.extensions) throw error;
                  const creditsRemaining = await store.availableCredits(organizationId, clock.now());
                  throw new Problem(error.slug, error.detailText, { ...error.extensions, meta: meta("idempotency-conflict", gtin, creditsRemaining) }, error.headers, error.statusOverride);
                },
              );
        if (replayed) set.headers["idempotent-replayed"] = "true";
        keyUsage.record(key.credential.id, clock.now());
        countUsage(replayed ? "replayed" : body.meta.reason);
        return body;
      } catch (error) {
        const reason = error instanceof Problem ? (error.extensions.meta as { reason?: unknown } | undefined)?.reason : undefined;
        countUsage(typeof reason === "string" ? reason : "unavailable");
        throw error;
      }
    },
    {
      params: t.Object({ gtin: t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }) }),
      // Documented here, checked by the handler (noValidate): see above.
      query: t.Object(
        { language: t.Optional(t.String({ description: "Response language: `en` or `fr` (default: Accept-Language, then `en`)", examples: ["en"] })) },
        { noValidate: true },
      ),
      headers: t.Object(
        {
          "accept-language": t.Optional(t.String({ description: "Used when `language` is absent: en or fr" })),
          "idempotency-key": IdempotencyKeyHeader,
        },
        { noValidate: true },
      ),
      response: {
        // Documented, not checked per request: the handler builds the 200 body from typed parts.
        200: PriceEnvelopeUnchecked,
        ...CommonErrors,
        400: PriceProblem(["invalid-gtin", "invalid-parameter"]),
        401: PriceProblem(["unauthorized"]),
        402: PriceProblem(["insufficient-credits"]),
        404: PriceProblem(["product-not-found"]),
        409: PriceProblem(["conflict"]),
        422: PriceProblem(["invalid-body"]),
        429: PriceProblem(["rate-limited"]),
        503: PriceProblem(["unavailable"]),
      },
      detail: {
        summary: "Fresh price offers for a product",
        description:
          "Billed in credits only for reason `fresh-offer`. Outcomes: 200 fresh-offer / no-data / stale-data, 400 invalid-gtin or invalid-parameter, 401 unauthorized (also for a key past its `expiresAt`), 402 insufficient-credits (the organization's balance, or the key's `monthlyCreditLimit` for the current UTC month: the detail names the limit and its reset), 404 product-not-found, 429 rate-limited (by the key's own `rateLimit` when it has one, shown in RateLimit-Policy as `\"key\"`), 503 unavailable when the debit could not be recorded (nothing billed, the credits are free again, retry). Error bodies carry `meta`. With an `Idempotency-Key` header, a retry within 24 h with the same GTIN and language gets the stored answer (header `Idempotent-Replayed: true`) and is not billed again; the same key for another GTIN or language is 422; a retry while the first is in flight is 409. Only 200 answers are stored: an error answer can be retried with the same key.",
        tags: ["Products"],
        operationId: "getProductPrice",
        security: [{ apiKey: [] }],
      },
    },
  );
}
