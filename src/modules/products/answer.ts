import type { KeyCredential } from "../../db/store";
import type { Services } from "../../services";
import { noteBillingMeta } from "../../http/observability";
import { PROBLEMS, Problem } from "../../http/problem";
import { sendableBody } from "../../http/large-body";
import type { Texts } from "../../http/validation";
import { nextUTCMonthStart, toISO } from "../../lib/clock";
import { joinUTF8 } from "../../lib/utf8";
import { normalizeGTIN } from "./gtin";
import { ITEM_REASONS, type BatchItemValue, type BatchMetaValue, type ItemReason, type PriceDataValue, type PriceMetaValue, type Reason } from "./model";
import type { BatchLookup, Lookup } from "./parse";
import type { PriceLookupDeps, PriceLookupResult } from "./service";

const DEBIT_FAILED = {
  en: "The debit for this look-up could not be recorded, so it was not billed and its credits are free again; retry in a moment.",
  fr: "Le débit de cette consultation n'a pas pu être enregistré : elle n'est pas facturée et ses crédits sont de nouveau disponibles ; réessayez dans un instant.",
};
const DEBIT_IN_DOUBT = {
  en: "The database stopped answering while this look-up's debit was being written, so whether it was billed is not known: if it was, the ledger lists it under this requestId. A retry with the same Idempotency-Key answers it without billing it twice.",
  fr: "La base de données a cessé de répondre pendant l'écriture du débit de cette consultation : on ne sait donc pas si elle a été facturée. Si elle l'a été, le registre la mentionne sous ce requestId. Une nouvelle tentative avec la même Idempotency-Key y répond sans la facturer deux fois.",
};

/** The 402 of a key at its monthly credit limit: the limit and when it resets (the 1st of next month, UTC). */
export function keyLimitReached(limit: number, now: number): Texts {
  const resetsAt = toISO(nextUTCMonthStart(now));
  return {
    en: `This API key reached its monthly credit limit of ${limit} credits; it resets at ${resetsAt}. The organization's other keys are not affected.`,
    fr: `Cette clé d'API a atteint sa limite mensuelle de ${limit} crédits ; elle se renouvelle le ${resetsAt}. Les autres clés de l'organisation ne sont pas concernées.`,
  };
}

/** One price request once its key is known: what every step and every `meta` of its answer share. */
export interface PriceCall {
  services: Services;
  deps: PriceLookupDeps;
  key: KeyCredential;
  request: Request;
  route: "single" | "batch";
  requestId: string;
  startedAt: number;
  /** The single look-up's GTIN as asked, normalized when it is one (its `meta.gtin`). */
  gtin: string;
}

/** What the price routes compute once: the look-up's dependencies. */
export function priceLookupDeps(services: Services): PriceLookupDeps {
  const { store, clock, lookups, config } = services;
  return { store, clock, lookups, creditCost: config.creditCost, freshnessWindowMs: config.freshnessWindowMs };
}

/** The call of a single look-up (`rawGtin` given) or of a batch. */
export function priceCall(
  services: Services,
  deps: PriceLookupDeps,
  key: KeyCredential,
  context: { request: Request; set: { headers: Record<string, unknown> } },
  rawGtin?: string,
): PriceCall {
  const gtin = rawGtin === undefined ? "" : (normalizeGTIN(rawGtin) ?? rawGtin);
  const requestId = String(context.set.headers["x-request-id"]);
  return { services, deps, key, request: context.request, route: rawGtin === undefined ? "batch" : "single", requestId, startedAt: performance.now(), gtin };
}

export type SingleAnswer = { meta: PriceMetaValue; data: PriceDataValue };
export type BatchAnswer = { meta: BatchMetaValue; data: BatchItemValue[] };
export type PriceAnswer = SingleAnswer | BatchAnswer;

type MetaSource = Pick<PriceCall, "requestId" | "startedAt" | "gtin">;

export function singleMeta(source: MetaSource, reason: Reason, creditsRemaining: number, creditsConsumed = 0): PriceMetaValue {
  const { requestId, gtin } = source;
  const responseTimeMs = Math.round(performance.now() - source.startedAt);
  return { requestId, gtin, facet: "product.price", billable: creditsConsumed > 0, creditsConsumed, creditsRemaining, reason, responseTimeMs };
}

export function batchMeta(source: MetaSource, creditsRemaining: number, creditsConsumed = 0, items: BatchItemValue[] = []): BatchMetaValue {
  const reasons = Object.fromEntries(ITEM_REASONS.map((reason) => [reason, 0])) as Record<ItemReason, number>;
  for (const item of items) reasons[item.reason] += 1;
  const responseTimeMs = Math.round(performance.now() - source.startedAt);
  return {
    requestId: source.requestId,
    facet: "product.price",
    billable: creditsConsumed > 0,
    creditsConsumed,
    creditsRemaining,
    responseTimeMs,
    itemCount: items.length,
    reasons,
  };
}

/** The `meta` of a problem that answers the whole request. */
export function problemMeta(call: Pick<PriceCall, "route"> & MetaSource, reason: Reason, creditsRemaining: number): object {
  return call.route === "single" ? singleMeta(call, reason, creditsRemaining) : { ...batchMeta(call, creditsRemaining), reason };
}

/** The answer of a look-up: the 200 body, or its 402, 404 or 503 problem with `meta`, as a value. */
export function answerOf(call: PriceCall, lookup: Lookup, result: PriceLookupResult, limitHeaders: Record<string, string>): PriceAnswer | Problem {
  const refused = refusalOf(call, result, limitHeaders);
  if (refused !== null) return refused;
  return lookup.kind === "single" ? singleAnswer(call, result, limitHeaders) : batchAnswer(call, lookup, result);
}

function refusalOf(call: PriceCall, result: PriceLookupResult, headers: Record<string, string>): Problem | null {
  if (result.status === 200) return null;
  const meta = problemMeta(call, result.status === 402 ? "insufficient-credits" : "unavailable", result.creditsRemaining);
  if (result.status === 503) {
    return new Problem("unavailable", {
      detail: result.debitInDoubt ? DEBIT_IN_DOUBT : DEBIT_FAILED,
      extensions: { meta },
      headers: { ...headers, "retry-after": "1" },
    });
  }
  const detail = result.keyLimit === undefined ? undefined : keyLimitReached(result.keyLimit, call.services.clock.now());
  return new Problem("insufficient-credits", { detail, extensions: { meta }, headers });
}

function singleAnswer(call: PriceCall, result: PriceLookupResult, headers: Record<string, string>): SingleAnswer | Problem {
  const item = result.items[0]!;
  const meta = singleMeta(call, item.reason, result.creditsRemaining, result.creditsConsumed);
  if (item.data === null) return new Problem("product-not-found", { extensions: { meta }, headers });
  return { meta, data: item.data };
}

function batchAnswer(call: PriceCall, lookup: BatchLookup, result: PriceLookupResult): BatchAnswer {
  const outcomes = new Map(result.items.map((item) => [item.gtin, item]));
  const typeBase = call.services.config.errorTypeBase;
  const itemProblem = (slug: "invalid-gtin" | "product-not-found") => {
    const entry = PROBLEMS[slug];
    return { type: `${typeBase}/${slug}`, title: entry.title, status: entry.status, detail: entry[lookup.language] };
  };
  const data = lookup.asked.map((input, index): BatchItemValue => {
    const gtin = lookup.normalized[index] ?? null;
    if (gtin === null) return { input, gtin: input, reason: "invalid-gtin", problem: itemProblem("invalid-gtin") };
    const outcome = outcomes.get(gtin)!;
    if (outcome.reason === "product-not-found") return { input, gtin, reason: "product-not-found", problem: itemProblem("product-not-found") };
    return { input, gtin, reason: outcome.reason, data: outcome.data! };
  });
  return { meta: batchMeta(call, result.creditsRemaining, result.creditsConsumed, data), data };
}

/** What the look-up answered, and the result it came from (null for an answer replayed or stored under an Idempotency-Key). */
export interface LookedUp {
  answer: PriceAnswer | Problem;
  result: PriceLookupResult | null;
  replayed: boolean;
}

/**
 * Sends the look-up's answer and counts it: a problem is thrown; a fresh answer goes out as UTF-8
 * bytes written around each product's `data` serialized once (the route schemas document it), an
 * answer kept under an Idempotency-Key as it was stored.
 */
export function writePriceAnswer(call: PriceCall, lookedUp: LookedUp, set: { headers: Record<string, unknown> }): PriceAnswer | Uint8Array | Response {
  const { answer, result } = lookedUp;
  if (answer instanceof Problem) throw answer;
  call.services.keyUsage.record(call.key.id, call.services.clock.now());
  if (lookedUp.replayed) {
    set.headers["idempotent-replayed"] = "true";
    countUsage(call, "replayed");
    return answer;
  }
  countAnswer(call, answer);
  if (result === null) return answer;
  noteBillingMeta(call.request, answer.meta);
  set.headers["content-type"] = "application/json";
  return sendableBody(answerBytes(answer, result));
}

function answerBytes(answer: PriceAnswer, result: PriceLookupResult): Uint8Array {
  if (!Array.isArray(answer.data)) return joinUTF8([`{"meta":${JSON.stringify(answer.meta)},"data":`, result.items[0]!.dataJSON!, "}"]);
  const dataJSON = new Map(result.items.map((item) => [item.gtin, item.dataJSON]));
  const parts: Array<string | Uint8Array> = [`{"meta":${JSON.stringify(answer.meta)},"data":[`];
  answer.data.forEach((item, index) => {
    const separator = index === 0 ? "" : ",";
    if (!("data" in item)) parts.push(separator + JSON.stringify(item));
    else
      parts.push(`${separator}{"input":${JSON.stringify(item.input)},"gtin":"${item.gtin}","reason":"${item.reason}","data":`, dataJSON.get(item.gtin)!, "}");
  });
  parts.push("]}");
  return joinUTF8(parts);
}

/** Every answer to a known key counts in the usage counters under its reason (billed ones in the debit's transaction too). */
function countUsage(call: PriceCall, reason: string): void {
  call.services.usageCounters.record(call.key.organizationId, call.key.id, reason, call.services.clock.now());
}

function countAnswer(call: PriceCall, answer: PriceAnswer): void {
  if (!Array.isArray(answer.data)) {
    countUsage(call, (answer.meta as PriceMetaValue).reason);
    return;
  }
  for (const item of answer.data) countUsage(call, item.reason);
}

/**
 * The problem that answers a refused request, counted under its reason: its `meta` completed (the
 * balance read with the key is as current as a second read for refusals before the look-up) and
 * written in the request's language.
 */
export async function refusal(call: PriceCall, error: unknown, set: { headers: Record<string, unknown> }): Promise<unknown> {
  const partial = error instanceof Problem ? (error.extensions.meta as { reason?: Reason; creditsRemaining?: number } | undefined) : undefined;
  countUsage(call, partial?.reason ?? "unavailable");
  if (!(error instanceof Problem) || partial?.reason === undefined) return error;
  const { store, clock } = call.services;
  const creditsRemaining = partial.creditsRemaining ?? (await store.availableCredits(call.key.organizationId, clock.now(), call.key.balance));
  const meta = { ...problemMeta(call, partial.reason, creditsRemaining), ...partial };
  return error.with({ extensions: { meta }, headers: { "content-language": error.headers["content-language"] ?? String(set.headers["content-language"]) } });
}
