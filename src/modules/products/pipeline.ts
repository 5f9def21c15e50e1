import { Value } from "@sinclair/typebox/value";
import type { KeyCredential } from "../../db/store";
import type { Services } from "../../services";
import { isLanguage, languageFromHeader, type Language } from "../../http/i18n";
import { hashRequestBody, IdempotencyKeyHeader, withIdempotency } from "../../http/idempotency";
import { noteBillingMeta } from "../../http/observability";
import { PROBLEMS, Problem } from "../../http/problem";
import { sendableBody } from "../../http/large-body";
import { closestToLimit, keyRateLimitPolicy, organizationRateLimitPolicy, rateLimitHeaders, rateLimitPolicyHeader, type RateLimitPolicy } from "../../http/rate-limit";
import { repeatedQueryParameter } from "../../http/request";
import { repeatedParameter, type Texts } from "../../http/validation";
import { nextUTCMonthStart, toISO } from "../../lib/clock";
import { joinUTF8 } from "../../lib/utf8";
import { checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { afterAuthentication } from "../../http/authentication-first";
import { normalizeGTIN } from "./gtin";
import { ITEM_REASONS, MAX_BATCH_GTINS, type BatchItemValue, type BatchMetaValue, type ItemReason, type PriceDataValue, type PriceMetaValue, type Reason } from "./model";
import { type ItemOutcome, lookUpPrices, type PriceLookupDeps, type PriceLookupResult } from "./service";

const DEBIT_FAILED = {
  en: "The debit for this look-up could not be recorded, so it was not billed and its credits are free again; retry in a moment.",
  fr: "Le débit de cette consultation n'a pas pu être enregistré : elle n'est pas facturée et ses crédits sont de nouveau disponibles ; réessayez dans un instant.",
};
const DEBIT_IN_DOUBT = {
  en: "The database stopped answering while this look-up's debit was being written, so whether it was billed is not known: if it was, the ledger lists it under this requestId. A retry with the same Idempotency-Key answers it without billing it twice.",
  fr: "La base de données a cessé de répondre pendant l'écriture du débit de cette consultation : on ne sait donc pas si elle a été facturée. Si elle l'a été, le registre la mentionne sous ce requestId. Une nouvelle tentative avec la même Idempotency-Key y répond sans la facturer deux fois.",
};
const BAD_LANGUAGE = { en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` };
const BAD_IDEMPOTENCY_KEY = { en: "Idempotency-Key must be 1 to 255 visible ASCII characters.", fr: "Idempotency-Key doit comporter de 1 à 255 caractères ASCII visibles." };
const BAD_GTIN_LIST = {
  en: `gtins must be a list of 1 to ${MAX_BATCH_GTINS} GTINs (strings).`,
  fr: `gtins doit être une liste de 1 à ${MAX_BATCH_GTINS} GTIN (chaînes de caractères).`,
};

/** The 402 of a key at its monthly credit limit: the limit and when it resets (the 1st of next month, UTC). */
function keyLimitReached(limit: number, now: number): Texts {
  const resetsAt = toISO(nextUTCMonthStart(now));
  return {
    en: `This API key reached its monthly credit limit of ${limit} credits; it resets at ${resetsAt}. The organization's other keys are not affected.`,
    fr: `Cette clé d'API a atteint sa limite mensuelle de ${limit} crédits ; elle se renouvelle le ${resetsAt}. Les autres clés de l'organisation ne sont pas concernées.`,
  };
}

export interface RequestContext {
  request: Request;
  set: { headers: Record<string, unknown> };
}

/** What an endpoint asks the pipeline to look up, once its request is checked. */
interface Lookup {
  /** Normalized and distinct. */
  gtins: string[];
  language: Language;
  /** Rate-limit tokens: 1 for a request, one per item for a batch. */
  items: number;
}

type Invalid = (detail: Texts | undefined, slug?: "invalid-parameter" | "invalid-gtin" | "unprocessable-body") => Promise<Problem>;

/** What differs between the single and the batch look-up; everything else is the pipeline's. */
interface Endpoint<Answer extends { meta: object }> {
  route: string;
  unit: "requests" | "items";
  /** The meta of a problem that answers the whole request. */
  problemMeta(reason: Reason, creditsRemaining: number): object;
  /** Checks the request after authentication (the data endpoint's order of evaluation), throwing `invalid`'s problems. */
  parse(invalid: Invalid): Promise<Lookup>;
  /** What identifies the checked request under an Idempotency-Key. */
  fingerprint(lookup: Lookup): unknown;
  /** The 200 answer of a look-up; throws `refused` (the 402 or 503 of the look-up) or its own problem, with `limitHeaders`. */
  answer(result: PriceLookupResult, refused: Problem | null, limitHeaders: Record<string, string>): Answer;
  /** The same answer as UTF-8 JSON, written around the `data` serialized once per product. */
  body(answer: Answer, result: PriceLookupResult): Uint8Array;
  /** Counts the answer's reasons, one per item, in the usage counters. */
  countReasons(answer: Answer, count: (reason: string) => void): void;
}

/**
 * The one pipeline of every price look-up, single or batch: key, request checks, rate limit (in
 * items), Idempotency-Key, then reserve → read → debit/release (lookUpPrices), usage counting and
 * the answer. The routes only hand their request over.
 */
export class PriceRequests {
  private readonly deps: PriceLookupDeps;
  private readonly organizationPolicy: RateLimitPolicy;
  private readonly policyHeaders: Record<"requests" | "items", Record<string, string>>;

  constructor(private readonly services: Services) {
    const { store, clock, config, rateLimiter } = services;
    this.deps = { store, clock, lookups: services.lookups, creditCost: config.creditCost, freshnessWindowMs: config.freshnessWindowMs };
    this.organizationPolicy = organizationRateLimitPolicy(config.organizationRateLimit);
    const servicePolicies = [rateLimiter.policy, this.organizationPolicy];
    this.policyHeaders = { requests: rateLimitPolicyHeader(servicePolicies), items: rateLimitPolicyHeader(servicePolicies, "items") };
  }

  /** GET /products/{gtin}/price */
  single(context: RequestContext, rawGtin: string, queryLanguage: string | undefined): Promise<unknown> {
    const startedAt = performance.now();
    const requestId = String(context.set.headers["x-request-id"]);
    let gtin = rawGtin;
    const meta = (reason: Reason, creditsRemaining: number, creditsConsumed = 0): PriceMetaValue => ({
      requestId,
      gtin,
      facet: "product.price",
      billable: creditsConsumed > 0,
      creditsConsumed,
      creditsRemaining,
      reason,
      responseTimeMs: Math.round(performance.now() - startedAt),
    });
    return this.serve<{ meta: PriceMetaValue; data: PriceDataValue }>(context, requestId, {
      route: "GET /products/price",
      unit: "requests",
      problemMeta: meta,
      parse: async (invalid) => {
        const repeated = repeatedQueryParameter(context.request.url);
        if (repeated !== null) throw await invalid(repeatedParameter(repeated));
        if (queryLanguage !== undefined && !isLanguage(queryLanguage)) throw await invalid(BAD_LANGUAGE);
        const normalized = normalizeGTIN(rawGtin);
        if (normalized === null) throw await invalid(undefined, "invalid-gtin");
        gtin = normalized;
        const language = queryLanguage ?? languageFromHeader(context.request.headers.get("accept-language"));
        return { gtins: [normalized], language, items: 1 };
      },
      fingerprint: (lookup) => ({ gtin, language: lookup.language }),
      answer: (result, refused, limitHeaders) => {
        const item = result.items[0];
        const resultMeta = meta(item?.reason ?? (result.status === 402 ? "insufficient-credits" : "unavailable"), result.creditsRemaining, result.creditsConsumed);
        if (refused !== null) throw withMeta(refused, resultMeta);
        if (item!.data === null) throw new Problem("product-not-found", { extensions: { meta: resultMeta }, headers: limitHeaders });
        return { meta: resultMeta, data: item!.data };
      },
      body: (answer, result) => joinUTF8([`{"meta":${JSON.stringify(answer.meta)},"data":`, result.items[0]!.dataJSON!, "}"]),
      countReasons: (answer, count) => count(answer.meta.reason),
    });
  }

  /** POST /products/prices */
  batch(context: RequestContext, body: unknown): Promise<unknown> {
    const startedAt = performance.now();
    const requestId = String(context.set.headers["x-request-id"]);
    const typeBase = this.services.config.errorTypeBase;
    const meta = (creditsRemaining: number, creditsConsumed = 0, items: BatchItemValue[] = []): BatchMetaValue => {
      const reasons = Object.fromEntries(ITEM_REASONS.map((reason) => [reason, 0])) as Record<ItemReason, number>;
      for (const item of items) reasons[item.reason] += 1;
      return {
        requestId,
        facet: "product.price",
        billable: creditsConsumed > 0,
        creditsConsumed,
        creditsRemaining,
        responseTimeMs: Math.round(performance.now() - startedAt),
        itemCount: items.length,
        reasons,
      };
    };
    let asked: string[] = [];
    let normalized: Array<string | null> = [];
    let language: Language = "en";
    const itemProblem = (slug: "invalid-gtin" | "product-not-found") => ({ type: `${typeBase}/${slug}`, title: PROBLEMS[slug].title, status: PROBLEMS[slug].status, detail: PROBLEMS[slug][language] });
    let outcomes = new Map<string, ItemOutcome>();
    return this.serve<{ meta: BatchMetaValue; data: BatchItemValue[] }>(context, requestId, {
      route: "POST /products/prices",
      unit: "items",
      problemMeta: (reason, creditsRemaining) => ({ ...meta(creditsRemaining), reason }),
      parse: async (invalid) => {
        const { gtins, language: bodyLanguage } = (typeof body === "object" && body !== null ? body : {}) as { gtins?: unknown; language?: unknown };
        if (!Array.isArray(gtins) || gtins.length < 1 || gtins.length > MAX_BATCH_GTINS || gtins.some((gtin) => typeof gtin !== "string")) throw await invalid(BAD_GTIN_LIST, "unprocessable-body");
        if (bodyLanguage !== undefined && !isLanguage(bodyLanguage)) throw await invalid(BAD_LANGUAGE, "unprocessable-body");
        asked = gtins as string[];
        normalized = asked.map(normalizeGTIN);
        language = bodyLanguage ?? languageFromHeader(context.request.headers.get("accept-language"));
        const distinct = [...new Set(normalized.filter((gtin): gtin is string => gtin !== null))];
        return { gtins: distinct, language, items: asked.length };
      },
      fingerprint: () => ({ gtins: asked, language }),
      answer: (result, refused) => {
        if (refused !== null) throw withMeta(refused, { ...meta(result.creditsRemaining), reason: result.status === 402 ? "insufficient-credits" : "unavailable" });
        outcomes = new Map(result.items.map((item) => [item.gtin, item]));
        const data = asked.map((input, index): BatchItemValue => {
          const gtin = normalized[index] ?? null;
          if (gtin === null) return { input, gtin: input, reason: "invalid-gtin", problem: itemProblem("invalid-gtin") };
          const outcome = outcomes.get(gtin)!;
          if (outcome.reason === "product-not-found") return { input, gtin, reason: "product-not-found", problem: itemProblem("product-not-found") };
          return { input, gtin, reason: outcome.reason, data: outcome.data! };
        });
        return { meta: meta(result.creditsRemaining, result.creditsConsumed, data), data };
      },
      body: (answer) => {
        const parts: Array<string | Uint8Array> = [`{"meta":${JSON.stringify(answer.meta)},"data":[`];
        answer.data.forEach((item, index) => {
          const separator = index === 0 ? "" : ",";
          if (!("data" in item)) parts.push(separator + JSON.stringify(item));
          else parts.push(`${separator}{"input":${JSON.stringify(item.input)},"gtin":"${item.gtin}","reason":"${item.reason}","data":`, outcomes.get(item.gtin)!.dataJSON!, "}");
        });
        parts.push("]}");
        return joinUTF8(parts);
      },
      countReasons: (answer, count) => {
        for (const item of answer.data) count(item.reason);
      },
    });
  }

  private async serve<Answer extends { meta: object }>(context: RequestContext, requestId: string, endpoint: Endpoint<Answer>): Promise<unknown> {
    const { request, set } = context;
    const { store, clock, config, keyUsage, usageCounters } = this.services;
    Object.assign(set.headers, this.policyHeaders[endpoint.unit]);
    const key = await checkBearerKey(request.headers.get("authorization"), store, config.keyPrefix, clock.now());
    if (!key.ok) throw unauthorizedKey(key.detail, { meta: endpoint.problemMeta("unauthorized", 0) });
    afterAuthentication(request);
    const credential = key.credential;
    const organizationId = credential.organizationId;
    const available = () => store.availableCredits(organizationId, clock.now());
    // For problems answered before anything else is awaited (the request's parameters, the rate
    // limit): the balance read with the key is as current as a second read.
    const availableAtKeyRead = () => store.availableCredits(organizationId, clock.now(), credential.balance);
    // Every answer to a known key counts in the usage counters under its reason (billed ones in the debit's transaction).
    const countUsage = (reason: string) => usageCounters.record(organizationId, credential.id, reason, clock.now());
    let language: Language | null = null;
    try {
      const invalid: Invalid = async (detail, slug = "invalid-parameter") =>
        new Problem(slug, { detail, extensions: { meta: endpoint.problemMeta(slug === "invalid-gtin" ? "invalid-gtin" : "invalid-parameter", await availableAtKeyRead()) } });
      const lookup = await endpoint.parse(invalid);
      // The language the request chose (a batch may choose it in its body), for its answer and its problems alike.
      language = lookup.language;
      set.headers["content-language"] = language;
      const idempotencyKey = request.headers.get("idempotency-key");
      if (idempotencyKey !== null && !Value.Check(IdempotencyKeyHeader, idempotencyKey)) throw await invalid(BAD_IDEMPOTENCY_KEY);
      const limitHeaders = await this.rateLimit(set, credential, lookup.items, endpoint);

      const input = { credential, gtins: lookup.gtins, language: lookup.language, requestId };

      if (idempotencyKey === null) {
        // The common case, answered as UTF-8 bytes: each product's `data` was serialized once (see answerOf),
        // so only the rest is serialized here; the route schemas document it (noValidate).
        const result = await this.lookUp(input);
        const answer = endpoint.answer(result, refusal(result, limitHeaders, clock.now()), limitHeaders);
        keyUsage.record(credential.id, clock.now());
        noteBillingMeta(request, answer.meta);
        endpoint.countReasons(answer, countUsage);
        set.headers["content-type"] = "application/json";
        return sendableBody(endpoint.body(answer, result));
      }
      const run = async (recorder: Parameters<Parameters<typeof withIdempotency>[2]>[0]) => {
        let sealed: Answer | undefined;
        const result = await this.lookUp({
          ...input,
          // A billed answer is stored in the debit's own transaction, so the two can never part.
          recordAnswer: async (billed) => {
            sealed = endpoint.answer(billed, refusal(billed, limitHeaders, clock.now()), limitHeaders);
            return { scope: recorder.scope, keyHash: recorder.keyHash, claimedAt: recorder.claimedAt, responseStatus: 200, responseBody: await recorder.seal(sealed) };
          },
        });
        // The sealed answer stands only if its debit committed; otherwise `answer` throws the 503.
        const billed = sealed !== undefined && result.creditsConsumed > 0;
        return { status: 200, body: billed ? sealed! : endpoint.answer(result, refusal(result, limitHeaders, clock.now()), limitHeaders), recorded: billed };
      };
      const { body, replayed } = await withIdempotency(
        store,
        { scope: `${organizationId}:${endpoint.route}`, key: idempotencyKey, requestHash: hashRequestBody(endpoint.fingerprint(lookup)), now: clock.now() },
        run,
      ).catch(async (error: unknown) => {
        if (!(error instanceof Problem) || "meta" in error.extensions) throw error;
        throw withMeta(error, endpoint.problemMeta("idempotency-conflict", await available()));
      });
      if (replayed) set.headers["idempotent-replayed"] = "true";
      keyUsage.record(credential.id, clock.now());
      if (replayed) countUsage("replayed");
      else endpoint.countReasons(body, countUsage);
      return body;
    } catch (error) {
      const reason = error instanceof Problem ? (error.extensions.meta as { reason?: unknown } | undefined)?.reason : undefined;
      countUsage(typeof reason === "string" ? reason : "unavailable");
      if (language !== null && error instanceof Problem) throw error.with({ headers: { "content-language": language } });
      throw error;
    }
  }

  /** The look-up; a debit in doubt is logged, for the operator who reconciles it with the ledger. */
  private async lookUp(input: Parameters<typeof lookUpPrices>[1]): Promise<PriceLookupResult> {
    const result = await lookUpPrices(this.deps, input);
    if (result.debitInDoubt) this.services.logger.warn("debit in doubt", { requestId: input.requestId, organizationId: input.credential.organizationId });
    return result;
  }

  /**
   * Takes the request's items from the bucket of the key's rotation line (under its own rate limit,
   * else the service's) and from the organization's, or from neither; 429 when one lacks them.
   */
  private async rateLimit(set: RequestContext["set"], credential: KeyCredential, items: number, endpoint: Endpoint<{ meta: object }>): Promise<Record<string, string>> {
    const { rateLimiter, clock, store } = this.services;
    const keyPolicy = credential.rateLimit === null ? rateLimiter.policy : keyRateLimitPolicy(credential.rateLimit);
    // Line ids start "key_" and organization ids "org_": the two never share a bucket.
    const charges = [
      { bucket: credential.lineId, policy: keyPolicy },
      { bucket: credential.organizationId, policy: this.organizationPolicy },
    ];
    const decisions = rateLimiter.takeAll(charges, clock.now(), items);
    const limitHeaders = rateLimitHeaders(decisions, endpoint.unit);
    Object.assign(set.headers, limitHeaders);
    if (decisions[0]!.allowed) return limitHeaders;
    const { policy, retryAfterSeconds } = closestToLimit(decisions);
    const detail = rateLimited({ policy, retryAfterSeconds, items, unit: endpoint.unit, organizationWide: policy === this.organizationPolicy });
    const meta = endpoint.problemMeta("rate-limited", await store.availableCredits(credential.organizationId, clock.now(), credential.balance));
    throw new Problem("rate-limited", { detail, extensions: { meta }, headers: limitHeaders });
  }
}

/** The 429's detail: the policy that refused, its unit, and when to retry. */
function rateLimited(refusal: { policy: RateLimitPolicy; retryAfterSeconds: number; items: number; unit: "requests" | "items"; organizationWide: boolean }): Texts {
  const { policy, retryAfterSeconds, items } = refusal;
  const what = refusal.unit === "items" ? { en: "GTINs", fr: "GTIN" } : { en: "requests", fr: "requêtes" };
  const whose = refusal.organizationWide ? { en: " for all of the organization's keys together", fr: " pour toutes les clés de l'organisation ensemble" } : { en: "", fr: "" };
  const asked = refusal.unit === "items" ? { en: ` (this batch has ${items})`, fr: ` (ce lot en compte ${items})` } : { en: "", fr: "" };
  return {
    en: `Rate limit of ${policy.limit} ${what.en} per ${policy.windowSeconds} s${whose.en} exceeded${asked.en}; retry in ${retryAfterSeconds} s.`,
    fr: `Limite de ${policy.limit} ${what.fr} par ${policy.windowSeconds} s${whose.fr} dépassée${asked.fr} ; réessayez dans ${retryAfterSeconds} s.`,
  };
}

/** A 402 or 503 of the look-up as a problem (the endpoint adds its meta), or null for a 200. */
function refusal(result: PriceLookupResult, limitHeaders: Record<string, string>, now: number): Problem | null {
  if (result.status === 200) return null;
  if (result.status === 503) return new Problem("unavailable", { detail: result.debitInDoubt ? DEBIT_IN_DOUBT : DEBIT_FAILED, headers: { ...limitHeaders, "retry-after": "1" } });
  return new Problem("insufficient-credits", { detail: result.keyLimit === undefined ? undefined : keyLimitReached(result.keyLimit, now), headers: limitHeaders });
}

/** The same problem with the request's meta as an extension member. */
function withMeta(problem: Problem, meta: object): Problem {
  return problem.with({ extensions: { meta } });
}
