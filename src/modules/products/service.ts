import { CreditsSpentMeanwhile, DebitInDoubt, type KeyCredential, type OfferRecord, type ProductRecord, type Store, type UsageRecord } from "../../db/store";
import type { Clock } from "../../lib/clock";
import type { InFlightWork } from "../../lib/in-flight";
import { toISO } from "../../lib/clock";
import { money } from "../../lib/money";
import { AVAILABILITY_LABELS, type Language } from "../../http/i18n";
import type { PriceDataValue } from "./model";

export interface PriceLookupDeps {
  store: Store;
  /** Every look-up is tracked here: it holds credits until it commits or releases them. */
  lookups: InFlightWork;
  clock: Clock;
  creditCost: number;
  freshnessWindowMs: number;
}

/** What one GTIN of a look-up found: the product's answer, or that there is none. */
export interface ItemOutcome {
  gtin: string;
  reason: "fresh-offer" | "stale-data" | "no-data" | "product-not-found";
  data: PriceDataValue | null;
  /** `data` serialized once (JSON as UTF-8), shared by every answer of that product and language while it holds. */
  dataJSON: Uint8Array | null;
}

export interface PriceLookupResult {
  /** 200: `items` holds an outcome per GTIN asked; 402: nothing reserved; 503: nothing billed (unless `debitInDoubt`), credits free again. */
  status: 200 | 402 | 503;
  /** On a 503: the database stopped answering while the debit was written, so it may have been billed (see DebitInDoubt). */
  debitInDoubt?: true;
  items: ItemOutcome[];
  creditsConsumed: number;
  creditsRemaining: number;
  /** On a 402 caused by the key's monthly credit limit (not the balance): that limit. */
  keyLimit?: number;
}

/** What a product answers in one language, computed once: reason, `data` and its JSON. */
interface PreparedAnswer {
  reason: "fresh-offer" | "stale-data" | "no-data";
  data: PriceDataValue;
  dataJSON: Uint8Array;
  /** When it was computed, and until when it holds: the moment its first fresh offer leaves the window. */
  computedAt: number;
  validUntil: number;
}

/**
 * Prepared answers per product found, keyed by the very object the store returned: a store that
 * caches products (SQLite) hands out the same object until the product changes (an import, a
 * commit by another connection), so a changed product is a new key and the old answers are
 * garbage. Time alone changes an answer only when a fresh offer leaves the freshness window
 * (stale offers never turn fresh again), so each answer says until when it holds.
 */
const preparedAnswers = new WeakMap<object, Partial<Record<Language, PreparedAnswer>>>();

function priceData(product: ProductRecord, offers: OfferRecord[], lastObservedAt: number | null, language: Language): PriceDataValue {
  const sorted = [...offers].sort((a, b) => a.priceAmount - b.priceAmount || a.merchantId.localeCompare(b.merchantId));
  const cheapest = sorted[0];
  const dearest = sorted[sorted.length - 1];
  return {
    product: { gtin: product.gtin, title: product.title, brand: product.brand, imageUrl: product.imageUrl },
    offers: sorted.map((offer) => ({
      merchant: { id: offer.merchantId, name: offer.merchantName },
      price: money(offer.priceAmount, offer.currency, language),
      shipping: offer.shippingAmount === null ? null : money(offer.shippingAmount, offer.currency, language),
      availability: offer.availability,
      availabilityLabel: AVAILABILITY_LABELS[language][offer.availability]!,
      condition: offer.condition,
      url: offer.url,
      observedAt: toISO(offer.observedAt),
    })),
    summary: {
      offerCount: sorted.length,
      lowestPrice: cheapest ? money(cheapest.priceAmount, cheapest.currency, language) : null,
      highestPrice: dearest ? money(dearest.priceAmount, dearest.currency, language) : null,
    },
    lastObservedAt: toISO(lastObservedAt),
  };
}

/**
 * The billed look-up of distinct, valid GTIN-14s once the request is admitted (a single look-up is
 * a list of one): reserve the cost of every one in one step, look the products up, then debit the
 * fresh ones together and give the rest back, or release everything when none is fresh. A batch
 * is answered whole or not at all: when the reservation cannot be made, nothing is looked up (402).
 * When the debit finds the credits spent meanwhile (PostgreSQL, by another instance), the answer is
 * the 402 it would have been at the start. An answer claims a debit only when the debit committed: when the commit does not happen (the
 * reservation was swept, a write failed, the database stayed locked) or anything fails after the
 * reservation, its credits are given back at once and the answer is 503 `unavailable`, without data.
 */
export function lookUpPrices(deps: PriceLookupDeps, input: LookupInput): Promise<PriceLookupResult> {
  return deps.lookups.track(lookUp(deps, input));
}

interface LookupInput {
  credential: KeyCredential;
  /** Normalized and distinct: a GTIN asked twice is billed once. */
  gtins: readonly string[];
  language: Language;
  requestId: string;
  /** For a billed answer: returns the Idempotency-Key record to complete in the debit's own transaction. */
  recordAnswer?: (result: PriceLookupResult) => Promise<UsageRecord["idempotency"]>;
}

async function lookUp(deps: PriceLookupDeps, input: LookupInput): Promise<PriceLookupResult> {
  const { store, clock, creditCost } = deps;
  const organizationId = input.credential.organizationId;
  // Nothing well-formed to look up (a batch of invalid GTINs only): nothing to reserve either.
  if (input.gtins.length === 0)
    return { status: 200, items: [], creditsConsumed: 0, creditsRemaining: await store.availableCredits(organizationId, clock.now()) };
  const reserved = creditCost * input.gtins.length;
  const reservation = await store.reserveCredits({
    organizationId,
    amount: reserved,
    keyId: input.credential.id,
    requestId: input.requestId,
    now: clock.now(),
    balance: input.credential.balance,
  });
  if (!reservation.ok) {
    return { status: 402, items: [], creditsConsumed: 0, creditsRemaining: reservation.available, keyLimit: reservation.keyLimit };
  }

  let held = true;
  let debitInDoubt: true | undefined;
  try {
    // A single look-up reads its product by the store's prepared statement; a batch reads all of its products at once.
    const found = input.gtins.length === 1 ? [await store.findProductWithOffers(input.gtins[0]!)] : await store.findProductsWithOffers(input.gtins);
    const readAt = clock.now();
    const items: ItemOutcome[] = [];
    let freshCount = 0;
    for (let index = 0; index < input.gtins.length; index++) {
      const item = answerOf(deps, input.gtins[index]!, found[index]!, input.language, readAt);
      items.push(item);
      if (item.reason === "fresh-offer") freshCount++;
    }
    if (freshCount === 0) {
      await store.releaseReservation(reservation.reservationId, clock.now());
      held = false;
      return { status: 200, items, creditsConsumed: 0, creditsRemaining: await store.availableCredits(organizationId, clock.now()) };
    }
    const consumed = creditCost * freshCount;
    // The partial commit: what the items that are not fresh held goes back first, then the rest is debited.
    if (consumed < reserved && !(await store.shrinkReservation(reservation.reservationId, consumed, clock.now())))
      throw new Error("reservation no longer held");
    // The held credits are already out of the available balance the reservation reported, so this is the balance after the debit.
    const result: PriceLookupResult = { status: 200, items, creditsConsumed: consumed, creditsRemaining: reservation.available + reserved - consumed };
    const idempotency = await input.recordAnswer?.(result);
    const now = clock.now();
    // One usage row per request (the ledger holds a request's debit once): a batch's names its GTINs' count.
    const onlyFresh = freshCount === 1 ? items.find((item) => item.reason === "fresh-offer")!.gtin : null;
    const usage: UsageRecord =
      onlyFresh !== null
        ? { gtin: onlyFresh, description: `Price look-up ${onlyFresh}`, now, idempotency }
        : { gtin: null, description: `Price look-ups of ${freshCount} GTINs`, now, idempotency, items: freshCount };
    held = !(await store.commitReservation(reservation.reservationId, usage));
    if (!held) return result;
  } catch (error) {
    // The debit found the credits spent meanwhile (by another instance): nothing was billed or is held.
    if (error instanceof CreditsSpentMeanwhile) return { status: 402, items: [], creditsConsumed: 0, creditsRemaining: error.available };
    if (!held) throw error;
    if (error instanceof DebitInDoubt) debitInDoubt = true;
  }
  // No debit (or none known): whatever is still held goes back (a release of what the sweep took
  // already is a no-op). A debit in doubt that did commit took its credits from the buckets, which
  // the balance is computed from, so giving its hold back never counts them twice.
  await giveBack(store, clock, reservation.reservationId);
  const creditsRemaining = await store.availableCredits(organizationId, clock.now()).catch(() => 0);
  return debitInDoubt
    ? { status: 503, items: [], creditsConsumed: 0, creditsRemaining, debitInDoubt }
    : { status: 503, items: [], creditsConsumed: 0, creditsRemaining };
}

function answerOf(
  deps: PriceLookupDeps,
  gtin: string,
  found: { product: ProductRecord; offers: OfferRecord[] } | null,
  language: Language,
  now: number,
): ItemOutcome {
  if (found === null) return { gtin, reason: "product-not-found", data: null, dataJSON: null };
  let answers = preparedAnswers.get(found);
  let answer = answers?.[language];
  if (answer === undefined || now < answer.computedAt || now > answer.validUntil) {
    answer = prepareAnswer(found, language, now, deps.freshnessWindowMs);
    if (answers === undefined) preparedAnswers.set(found, (answers = {}));
    answers[language] = answer;
  }
  return { gtin, reason: answer.reason, data: answer.data, dataJSON: answer.dataJSON };
}

function prepareAnswer(found: { product: ProductRecord; offers: OfferRecord[] }, language: Language, now: number, freshnessWindowMs: number): PreparedAnswer {
  const prepared = (reason: PreparedAnswer["reason"], data: PriceDataValue, validUntil: number): PreparedAnswer => ({
    reason,
    data,
    dataJSON: Buffer.from(JSON.stringify(data)),
    computedAt: now,
    validUntil,
  });
  if (found.offers.length === 0) return prepared("no-data", priceData(found.product, [], null, language), Infinity);
  const fresh = found.offers.filter((offer) => now - offer.observedAt <= freshnessWindowMs);
  const lastObservedAt = Math.max(...(fresh.length > 0 ? fresh : found.offers).map((offer) => offer.observedAt));
  if (fresh.length === 0) return prepared("stale-data", priceData(found.product, [], lastObservedAt, language), Infinity);
  const firstToAge = Math.min(...fresh.map((offer) => offer.observedAt)) + freshnessWindowMs;
  return prepared("fresh-offer", priceData(found.product, fresh, lastObservedAt, language), firstToAge);
}

/**
 * Releases a reservation whose debit did not happen. When the release's own write fails too (it pays
 * a refund what it is owed from the held credits), it is tried again in the background until it
 * succeeds: meanwhile the credits stay held, so they are never spent twice nor lost to the refund.
 */
async function giveBack(store: Store, clock: Clock, reservationId: string, delayMs = 100): Promise<void> {
  try {
    await store.releaseReservation(reservationId, clock.now());
  } catch {
    setTimeout(() => void giveBack(store, clock, reservationId, Math.min(delayMs * 2, 5_000)), delayMs).unref();
  }
}
