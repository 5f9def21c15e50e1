import { Value } from "@sinclair/typebox/value";
import { isLanguage, languageFromHeader, type Language } from "../../http/i18n";
import { IdempotencyKeyHeader } from "../../http/idempotency";
import { Problem, type ProblemSlug } from "../../http/problem";
import { repeatedQueryParameter } from "../../http/request";
import { repeatedParameter, type Texts } from "../../http/validation";
import { normalizeGTIN } from "./gtin";
import { MAX_BATCH_GTINS, type Reason } from "./model";

const BAD_LANGUAGE = { en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` };
const BAD_IDEMPOTENCY_KEY = {
  en: "Idempotency-Key must be 1 to 255 visible ASCII characters.",
  fr: "Idempotency-Key doit comporter de 1 à 255 caractères ASCII visibles.",
};
const BAD_GTIN_LIST = {
  en: `gtins must be a list of 1 to ${MAX_BATCH_GTINS} GTINs (strings).`,
  fr: `gtins doit être une liste de 1 à ${MAX_BATCH_GTINS} GTIN (chaînes de caractères).`,
};

interface CheckedRequest {
  /** The GTINs to look up: normalized and distinct. */
  gtins: string[];
  language: Language;
  /** Rate-limit tokens: 1 for a request, one per item asked for a batch. */
  items: number;
  idempotencyKey: string | null;
}

/** A single look-up, checked: its one GTIN, normalized. */
export interface SingleLookup extends CheckedRequest {
  kind: "single";
  gtin: string;
}

/** A batch look-up, checked: the GTINs as asked, each normalized (null when it is not a GTIN). */
export interface BatchLookup extends CheckedRequest {
  kind: "batch";
  asked: string[];
  normalized: Array<string | null>;
}

export type Lookup = SingleLookup | BatchLookup;

/** A refusal of the request before anything is looked up; its `meta` is completed by the route. */
function invalid(slug: ProblemSlug, detail: Texts | undefined, reason: Reason = "invalid-parameter"): Problem {
  return new Problem(slug, { detail, extensions: { meta: { reason } } });
}

/** The request's Idempotency-Key, checked once the request's language is known (its refusal is in it). */
function idempotencyKeyOf(request: Request, language: Language): string | null {
  const key = request.headers.get("idempotency-key");
  if (key === null || Value.Check(IdempotencyKeyHeader, key)) return key;
  throw invalid("invalid-parameter", BAD_IDEMPOTENCY_KEY).with({ headers: { "content-language": language } });
}

/** Checks GET /products/{gtin}/price in the data endpoint's order: parameters, GTIN, Idempotency-Key. */
export function parseSingleLookup(rawGtin: string, query: { language?: string }, request: Request): SingleLookup {
  const repeated = repeatedQueryParameter(request.url);
  if (repeated !== null) throw invalid("invalid-parameter", repeatedParameter(repeated));
  if (query.language !== undefined && !isLanguage(query.language)) throw invalid("invalid-parameter", BAD_LANGUAGE);
  const gtin = normalizeGTIN(rawGtin);
  if (gtin === null) throw invalid("invalid-gtin", undefined, "invalid-gtin");
  const language = query.language ?? languageFromHeader(request.headers.get("accept-language"));
  return { kind: "single", gtin, gtins: [gtin], language, items: 1, idempotencyKey: idempotencyKeyOf(request, language) };
}

/** Checks POST /products/prices: a body of 1 to 100 GTIN strings and an optional language, then Idempotency-Key. */
export function parseBatchLookup(body: unknown, request: Request): BatchLookup {
  const { gtins, language: asked } = (typeof body === "object" && body !== null ? body : {}) as { gtins?: unknown; language?: unknown };
  if (!isGTINList(gtins)) throw invalid("unprocessable-body", BAD_GTIN_LIST);
  if (asked !== undefined && !isLanguage(asked)) throw invalid("unprocessable-body", BAD_LANGUAGE);
  const normalized = gtins.map(normalizeGTIN);
  const distinct = [...new Set(normalized.filter((gtin): gtin is string => gtin !== null))];
  const language = asked ?? languageFromHeader(request.headers.get("accept-language"));
  return { kind: "batch", asked: gtins, normalized, gtins: distinct, language, items: gtins.length, idempotencyKey: idempotencyKeyOf(request, language) };
}

function isGTINList(gtins: unknown): gtins is string[] {
  return Array.isArray(gtins) && gtins.length >= 1 && gtins.length <= MAX_BATCH_GTINS && gtins.every((gtin) => typeof gtin === "string");
}

/** What identifies the checked request under an Idempotency-Key. */
export function fingerprintOf(lookup: Lookup): unknown {
  return lookup.kind === "single" ? { gtin: lookup.gtin, language: lookup.language } : { gtins: lookup.asked, language: lookup.language };
}
