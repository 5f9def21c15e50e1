import { Value } from "@sinclair/typebox/value";
import { CreditsSpentMeanwhile, DebitInDoubt, type KeyCredential, type Page, type ProductRecord, type UsageRecord } from "../../db/store";
import { decodeHistoryCursor, type HistoryPosition, type HistoryQuery, type PriceDayRecord, type PriceStateRecord } from "../../db/history/records";
import type { Services } from "../../services";
import { afterAuthentication } from "../../http/authentication-first";
import { AVAILABILITY_LABELS, isLanguage, languageFromHeader, type Language } from "../../http/i18n";
import { hashRequestBody, IdempotencyKeyHeader, type IdempotencyRecorder, withIdempotency } from "../../http/idempotency";
import { sendableBody } from "../../http/large-body";
import { noteBillingMeta } from "../../http/observability";
import { Problem } from "../../http/problem";
import { repeatedQueryParameter } from "../../http/request";
import { repeatedParameter, type Texts } from "../../http/validation";
import { toISO } from "../../lib/clock";
import { money } from "../../lib/money";
import { checkBearerKey, unauthorizedKey } from "../keys/bearer";
import { admit, type Admission, priceRateLimits, type PriceRateLimits } from "../products/admit";
import { keyLimitReached } from "../products/answer";
import { normalizeGTIN } from "../products/gtin";
import {
  DEFAULT_HISTORY_LIMIT,
  DEFAULT_HISTORY_RANGE_DAYS,
  MAX_HISTORY_LIMIT,
  MAX_HISTORY_RANGE_DAYS,
  type ChangePointValue,
  type DayPointValue,
  type HistoryDataValue,
  type HistoryMetaValue,
  type HistoryReason,
} from "./model";

const DAY_MS = 86_400_000;
const ROUTE = "GET /products/price/history";

/** The query string as the route receives it (documented in index.ts, checked here after authentication). */
export interface HistoryQueryString {
  from?: string;
  to?: string;
  merchant?: string;
  interval?: string;
  limit?: string;
  cursor?: string;
  language?: string;
}

export interface RequestContext {
  request: Request;
  set: { headers: Record<string, unknown> };
}

/** A checked request. */
interface Ask {
  gtin: string;
  language: Language;
  interval: "change" | "day";
  from: number;
  to: number;
  merchantId: string | null;
  limit: number;
  after: HistoryPosition | null;
  /** What identifies the request under an Idempotency-Key. */
  fingerprint: Record<string, unknown>;
}

type Answer = { meta: HistoryMetaValue; data: HistoryDataValue };

/** A billed answer's bytes, serialized while its debit commits. */
const serializedAnswers = new WeakMap<Answer, Buffer>();

/** A history request counts as one request against the rate limits. */
const ONE_REQUEST: Admission = { kind: "single", items: 1 };

const ISO_8601 = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

const TEXTS = {
  language: { en: `language must be "en" or "fr".`, fr: `language doit valoir « en » ou « fr ».` },
  idempotencyKey: {
    en: "Idempotency-Key must be 1 to 255 visible ASCII characters.",
    fr: "Idempotency-Key doit comporter de 1 à 255 caractères ASCII visibles.",
  },
  interval: { en: `interval must be "change" or "day".`, fr: `interval doit valoir « change » ou « day ».` },
  merchant: { en: "merchant must be a merchant id of 1 to 200 characters.", fr: "merchant doit être un identifiant de marchand de 1 à 200 caractères." },
  limit: { en: `limit must be a whole number from 1 to ${MAX_HISTORY_LIMIT}.`, fr: `limit doit être un nombre entier de 1 à ${MAX_HISTORY_LIMIT}.` },
  cursor: {
    en: "cursor must be a nextCursor this endpoint returned for the same interval.",
    fr: "cursor doit être un nextCursor renvoyé par ce point d'accès pour le même interval.",
  },
  order: { en: "from must be before to.", fr: "from doit être antérieur à to." },
  range: {
    en: `The range from from to to is at most ${MAX_HISTORY_RANGE_DAYS} days.`,
    fr: `L'intervalle de from à to est d'au plus ${MAX_HISTORY_RANGE_DAYS} jours.`,
  },
  debitFailed: {
    en: "The debit for this answer could not be recorded, so it was not billed and its credits are free again; retry in a moment.",
    fr: "Le débit de cette réponse n'a pas pu être enregistré : elle n'est pas facturée et ses crédits sont de nouveau disponibles ; réessayez dans un instant.",
  },
  debitInDoubt: {
    en: "The database stopped answering while this answer's debit was being written, so whether it was billed is not known: if it was, the ledger lists it under this requestId. A retry with the same Idempotency-Key answers it without billing it twice.",
    fr: "La base de données a cessé de répondre pendant l'écriture du débit de cette réponse : on ne sait donc pas si elle a été facturée. Si elle l'a été, le registre la mentionne sous ce requestId. Une nouvelle tentative avec la même Idempotency-Key y répond sans la facturer deux fois.",
  },
} satisfies Record<string, Texts>;

const instantText = (name: string): Texts => ({
  en: `${name} must be an ISO 8601 date (2026-11-22) or date-time with its offset (2026-11-22T10:00:00Z).`,
  fr: `${name} doit être une date ISO 8601 (2026-11-22) ou une date et heure avec son décalage (2026-11-22T10:00:00Z).`,
});

/**
 * GET /products/{gtin}/price/history: the data endpoint's rules (bearer key first, request checks,
 * the key's and the organization's rate limits, Idempotency-Key) around a billed read of the
 * product's price history. An answer with points is billed HISTORY_CREDIT_COST through the store's
 * reservation: reserved before the read, debited with the answer, released otherwise.
 */
export class PriceHistoryRequests {
  private readonly limits: PriceRateLimits;

  constructor(private readonly services: Services) {
    this.limits = priceRateLimits(services);
  }

  /**
   * Answers with the JSON as bytes (the route's 200 schema documents it): Elysia's own mapping of a
   * response object costs more than the whole read for a page of a thousand points.
   */
  async handle(context: RequestContext, rawGtin: string, query: HistoryQueryString): Promise<Uint8Array | Response> {
    const answer = await this.answerOf(context, rawGtin, query);
    context.set.headers["content-type"] = "application/json";
    return sendableBody(serializedAnswers.get(answer) ?? Buffer.from(JSON.stringify(answer)));
  }

  private async answerOf(context: RequestContext, rawGtin: string, query: HistoryQueryString): Promise<Answer> {
    const { request, set } = context;
    const { store, clock, keyUsage, usageCounters } = this.services;
    const startedAt = performance.now();
    const requestId = String(set.headers["x-request-id"]);
    let gtin = rawGtin;
    const meta = (reason: HistoryReason, creditsRemaining: number, creditsConsumed = 0): HistoryMetaValue => ({
      requestId,
      gtin,
      facet: "product.price-history",
      billable: creditsConsumed > 0,
      creditsConsumed,
      creditsRemaining,
      reason,
      responseTimeMs: Math.round(performance.now() - startedAt),
    });

    Object.assign(set.headers, this.limits.policyHeaders.requests);
    const key = await checkBearerKey(request.headers.get("authorization"), store, this.services.config.keyPrefix, clock.now());
    if (!key.ok) throw unauthorizedKey(key.detail, { meta: meta("unauthorized", 0) });
    afterAuthentication(request);
    const credential = key.credential;
    const organizationId = credential.organizationId;
    const availableAtKeyRead = () => store.availableCredits(organizationId, clock.now(), credential.balance);
    // Every answer to a known key counts in the usage counters under its reason; a billed one is counted by its debit.
    const countUsage = (reason: string) => usageCounters.record(organizationId, credential.id, reason, clock.now());
    let language: Language | null = null;
    try {
      const invalid = async (detail: Texts | undefined, slug: "invalid-parameter" | "invalid-gtin" = "invalid-parameter") =>
        new Problem(slug, { detail, extensions: { meta: meta(slug, await availableAtKeyRead()) } });
      const ask = await this.parse(request, rawGtin, query, invalid);
      gtin = ask.gtin;
      language = ask.language;
      set.headers["content-language"] = language;
      const idempotencyKey = request.headers.get("idempotency-key");
      if (idempotencyKey !== null && !Value.Check(IdempotencyKeyHeader, idempotencyKey)) throw await invalid(TEXTS.idempotencyKey);
      const limitHeaders = await this.rateLimit(set, credential, meta);

      if (idempotencyKey === null) {
        const { answer } = await this.answer(credential, ask, requestId, meta, limitHeaders);
        keyUsage.record(credential.id, clock.now());
        noteBillingMeta(request, answer.meta);
        if (!answer.meta.billable) countUsage(answer.meta.reason);
        return answer;
      }
      const { body, replayed } = await withIdempotency<Answer>(
        store,
        { scope: `${organizationId}:${ROUTE}`, key: idempotencyKey, requestHash: hashRequestBody(ask.fingerprint), now: clock.now() },
        async (recorder) => {
          const { answer, billed } = await this.answer(credential, ask, requestId, meta, limitHeaders, recorder);
          return { status: 200, body: answer, recorded: billed };
        },
      ).catch(async (error: unknown) => {
        if (!(error instanceof Problem) || "meta" in error.extensions) throw error;
        throw error.with({ extensions: { meta: meta("idempotency-conflict", await store.availableCredits(organizationId, clock.now())) } });
      });
      if (replayed) set.headers["idempotent-replayed"] = "true";
      keyUsage.record(credential.id, clock.now());
      noteBillingMeta(request, body.meta);
      if (replayed) countUsage("replayed");
      else if (!body.meta.billable) countUsage(body.meta.reason);
      return body;
    } catch (error) {
      const reason = error instanceof Problem ? (error.extensions.meta as { reason?: unknown } | undefined)?.reason : undefined;
      countUsage(typeof reason === "string" ? reason : "unavailable");
      if (language !== null && error instanceof Problem) throw error.with({ headers: { "content-language": language } });
      throw error;
    }
  }

  /** The request's parameters, in the data endpoint's order: repeated ones, language, GTIN, then the range and the page. */
  private async parse(
    request: Request,
    rawGtin: string,
    query: HistoryQueryString,
    invalid: (detail: Texts | undefined, slug?: "invalid-parameter" | "invalid-gtin") => Promise<Problem>,
  ): Promise<Ask> {
    const repeated = repeatedQueryParameter(request.url);
    if (repeated !== null) throw await invalid(repeatedParameter(repeated));
    if (query.language !== undefined && !isLanguage(query.language)) throw await invalid(TEXTS.language);
    const gtin = normalizeGTIN(rawGtin);
    if (gtin === null) throw await invalid(undefined, "invalid-gtin");
    const language = query.language ?? languageFromHeader(request.headers.get("accept-language"));
    const instant = async (value: string | undefined, name: string): Promise<number | null> => {
      if (value === undefined) return null;
      const ms = ISO_8601.test(value) ? Date.parse(value) : Number.NaN;
      if (!Number.isFinite(ms)) throw await invalid(instantText(name));
      return ms;
    };
    const interval = query.interval ?? "change";
    if (interval !== "change" && interval !== "day") throw await invalid(TEXTS.interval);
    const fromAsked = await instant(query.from, "from");
    const toAsked = await instant(query.to, "to");
    const to = toAsked ?? this.services.clock.now();
    const from = fromAsked ?? to - DEFAULT_HISTORY_RANGE_DAYS * DAY_MS;
    if (from >= to) throw await invalid(TEXTS.order);
    if (to - from > MAX_HISTORY_RANGE_DAYS * DAY_MS) throw await invalid(TEXTS.range);
    const merchantId = query.merchant ?? null;
    if (merchantId !== null && (merchantId.length < 1 || merchantId.length > 200)) throw await invalid(TEXTS.merchant);
    let limit = DEFAULT_HISTORY_LIMIT;
    if (query.limit !== undefined) {
      limit = /^[0-9]{1,5}$/.test(query.limit) ? Number(query.limit) : 0;
      if (limit < 1 || limit > MAX_HISTORY_LIMIT) throw await invalid(TEXTS.limit);
    }
    let after: HistoryPosition | null = null;
    if (query.cursor !== undefined) {
      after = decodeHistoryCursor(query.cursor, interval);
      if (after === null) throw await invalid(TEXTS.cursor);
    }
    return {
      gtin,
      language,
      interval,
      from,
      to,
      merchantId,
      limit,
      after,
      // The range as resolved, so a retry after midnight with defaults is still the same request.
      fingerprint: { gtin, language, interval, from: fromAsked, to: toAsked, merchant: merchantId, limit, cursor: query.cursor ?? null },
    };
  }

  /**
   * Reserve the answer's cost, read, then debit an answer with points (sealing it for its
   * Idempotency-Key in the debit's transaction) or release the reservation. Tracked as a look-up:
   * the credits it holds are given back before the server stops.
   */
  private answer(
    credential: KeyCredential,
    ask: Ask,
    requestId: string,
    meta: (reason: HistoryReason, remaining: number, consumed?: number) => HistoryMetaValue,
    limitHeaders: Record<string, string>,
    recorder?: IdempotencyRecorder,
  ): Promise<{ answer: Answer; billed: boolean }> {
    return this.services.lookups.track(this.billedRead(credential, ask, requestId, meta, limitHeaders, recorder));
  }

  private async billedRead(
    credential: KeyCredential,
    ask: Ask,
    requestId: string,
    meta: (reason: HistoryReason, remaining: number, consumed?: number) => HistoryMetaValue,
    limitHeaders: Record<string, string>,
    recorder?: IdempotencyRecorder,
  ): Promise<{ answer: Answer; billed: boolean }> {
    const { store, clock, config, logger } = this.services;
    const organizationId = credential.organizationId;
    const cost = config.historyCreditCost;
    const available = () => store.availableCredits(organizationId, clock.now());
    const reservation = await store.reserveCredits({
      organizationId,
      amount: cost,
      keyId: credential.id,
      requestId,
      now: clock.now(),
      balance: credential.balance,
    });
    if (!reservation.ok) {
      const detail = reservation.keyLimit === undefined ? undefined : keyLimitReached(reservation.keyLimit, clock.now());
      throw new Problem("insufficient-credits", { detail, extensions: { meta: meta("insufficient-credits", reservation.available) }, headers: limitHeaders });
    }
    const release = async () => {
      // When the release fails, the reservation sweep gives the credits back (STALE_RESERVATION_MS).
      await store.releaseReservation(reservation.reservationId, clock.now()).catch(() => undefined);
    };
    let held = true;
    let debitInDoubt = false;
    try {
      // The product and its history at once (PostgreSQL: on connections of their own); an unknown product has none.
      const [found, page] = await Promise.all([store.findProductWithOffers(ask.gtin), this.readPage(ask)]);
      if (found === null) {
        await release();
        held = false;
        throw new Problem("product-not-found", { extensions: { meta: meta("product-not-found", await available()) }, headers: limitHeaders });
      }
      const data = this.data(found.product, ask, page);
      if (data.points.length === 0) {
        await release();
        held = false;
        return { answer: { meta: meta("no-data", await available()), data }, billed: false };
      }
      // The held credits are already out of the balance the reservation reported: this is the balance after the debit.
      const answer: Answer = { meta: meta("history", reservation.available, cost), data };
      const idempotency =
        recorder === undefined
          ? undefined
          : { scope: recorder.scope, keyHash: recorder.keyHash, claimedAt: recorder.claimedAt, responseStatus: 200, responseBody: await recorder.seal(answer) };
      const usage: UsageRecord = { gtin: ask.gtin, description: `Price history ${ask.gtin}`, now: clock.now(), idempotency };
      const committing = store.commitReservation(reservation.reservationId, usage);
      // Written while the debit is on its way to the database; sent only once it is recorded.
      serializedAnswers.set(answer, Buffer.from(JSON.stringify(answer)));
      held = !(await committing);
      if (!held) return { answer, billed: true };
    } catch (error) {
      if (error instanceof CreditsSpentMeanwhile)
        throw new Problem("insufficient-credits", { extensions: { meta: meta("insufficient-credits", error.available) }, headers: limitHeaders });
      if (!held) throw error;
      if (error instanceof DebitInDoubt) debitInDoubt = true;
      else logger.warn("price history answer failed", { requestId, error: String(error) });
    }
    await release();
    if (debitInDoubt) logger.warn("debit in doubt", { requestId, organizationId });
    const remaining = await available().catch(() => 0);
    throw new Problem("unavailable", {
      detail: debitInDoubt ? TEXTS.debitInDoubt : TEXTS.debitFailed,
      extensions: { meta: meta("unavailable", remaining) },
      headers: { ...limitHeaders, "retry-after": "1" },
    });
  }

  /** The page of records the request asks for. */
  private readPage(ask: Ask): Promise<Page<PriceDayRecord> | Page<PriceStateRecord>> {
    const { store, clock } = this.services;
    const query: HistoryQuery = {
      gtin: ask.gtin,
      from: ask.from,
      to: ask.to,
      now: clock.now(),
      merchantId: ask.merchantId,
      limit: ask.limit,
      after: ask.after,
    };
    return ask.interval === "day" ? store.priceDays(query) : store.priceStates(query);
  }

  /** The answer's `data`: the product and the page's points, with prices as the price facet writes them. */
  private data(product: ProductRecord, ask: Ask, page: Page<PriceDayRecord> | Page<PriceStateRecord>): HistoryDataValue {
    const language = ask.language;
    const labels = AVAILABILITY_LABELS[language];
    // A page of days repeats each day once per merchant: each is written once.
    const dayTexts = new Map<number, string>();
    const dayText = (day: number) => {
      let text = dayTexts.get(day);
      if (text === undefined) dayTexts.set(day, (text = new Date(day).toISOString().slice(0, 10)));
      return text;
    };
    const points =
      ask.interval === "day"
        ? (page.items as PriceDayRecord[]).map(
            (day): DayPointValue => ({
              merchant: { id: day.merchantId, name: day.merchantName },
              day: dayText(day.day),
              lowestPrice: money(day.lowestAmount, day.currency, language),
              highestPrice: money(day.highestAmount, day.currency, language),
              lastPrice: money(day.lastAmount, day.currency, language),
              availability: day.availability,
              availabilityLabel: labels[day.availability]!,
            }),
          )
        : (page.items as PriceStateRecord[]).map(
            (state): ChangePointValue => ({
              merchant: { id: state.merchantId, name: state.merchantName },
              price: money(state.priceAmount, state.currency, language),
              shipping: state.shippingAmount === null ? null : money(state.shippingAmount, state.currency, language),
              availability: state.availability,
              availabilityLabel: labels[state.availability]!,
              validFrom: toISO(state.validFrom),
              validTo: toISO(state.validTo),
            }),
          );
    return {
      product: { gtin: product.gtin, title: product.title, brand: product.brand, imageUrl: product.imageUrl },
      interval: ask.interval,
      from: toISO(ask.from),
      to: toISO(ask.to),
      points,
      nextCursor: page.nextCursor,
    };
  }

  /** One request against the key's and the organization's rate limits, as on the data endpoint (shared buckets); a 429 carries the meta. */
  private async rateLimit(
    set: RequestContext["set"],
    credential: KeyCredential,
    meta: (reason: HistoryReason, remaining: number) => HistoryMetaValue,
  ): Promise<Record<string, string>> {
    try {
      return await admit(this.limits, credential, ONE_REQUEST, set);
    } catch (error) {
      if (!(error instanceof Problem)) throw error;
      const { store, clock } = this.services;
      throw error.with({
        extensions: { meta: meta("rate-limited", await store.availableCredits(credential.organizationId, clock.now(), credential.balance)) },
      });
    }
  }
}
