import type { KeyCredential, OfferRecord, ProductRecord, Store, UsageRecord } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { toISO } from "../../lib/clock";
import { money } from "../../lib/money";
import { AVAILABILITY_LABELS, type Language } from "../../http/i18n";
import type { PriceDataValue, Reason } from "./model";

export interface PriceLookupDeps {
  store: Store;
  clock: Clock;
  creditCost: number;
  freshnessWindowMs: number;
}

export interface PriceLookupResult {
  status: 200 | 402 | 404;
  reason: Reason;
  gtin: string;
  creditsConsumed: number;
  creditsRemaining: number;
  data: PriceDataValue | null;
}

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
 * The billed look-up of a valid GTIN-14 once the request is admitted: reserve the cost, look the product up, then commit the reservation for fresh data or release it for anything else. The
 * reservation is released if the look-up fails, so an error never keeps credits.
 */
export async function lookUpPrice(
  deps: PriceLookupDeps,
  input: {
    credential: KeyCredential;
    gtin: string;
    language: Language;
    requestId: string;
    /** For a billed answer: returns the Idempotency-Key record to complete in the debit's own transaction. */
    recordAnswer?: (result: PriceLookupResult) => Promise<UsageRecord["idempotency"]>;
  },
): Promise<PriceLookupResult> {
  const { store, clock } = deps;
  const { gtin } = input;
  const organizationId = input.credential.organizationId;
  const reservation = await store.reserveCredits({
    organizationId,
    amount: deps.creditCost,
    keyId: input.credential.id,
    requestId: input.requestId,
    now: clock.now(),
  });
  if (!reservation.ok) {
    return { status: 402, reason: "insufficient-credits", gtin, creditsConsumed: 0, creditsRemaining: reservation.available, data: null };
  }

  let outcome: { status: 200 | 404; reason: Reason; data: PriceDataValue | null };
  try {
    const found = await store.findProductWithOffers(gtin);
    const now = clock.now();
    if (found === null) {
      outcome = { status: 404, reason: "product-not-found", data: null };
    } else if (found.offers.length === 0) {
      outcome = { status: 200, reason: "no-data", data: priceData(found.product, [], null, input.language) };
    } else {
      const fresh = found.offers.filter((offer) => now - offer.observedAt <= deps.freshnessWindowMs);
      const lastObservedAt = Math.max(...(fresh.length > 0 ? fresh : found.offers).map((offer) => offer.observedAt));
      outcome =
        fresh.length === 0
          ? { status: 200, reason: "stale-data", data: priceData(found.product, [], lastObservedAt, input.language) }
          : { status: 200, reason: "fresh-offer", data: priceData(found.product, fresh, lastObservedAt, input.language) };
    }
  } catch (error) {
    await store.releaseReservation(reservation.reservationId);
    throw error;
  }

  if (outcome.reason !== "fresh-offer") {
    await store.releaseReservation(reservation.reservationId);
    return { ...outcome, gtin, creditsConsumed: 0, creditsRemaining: await store.availableCredits(organizationId, clock.now()) };
  }
  // The held credits are already out of the available balance, so it is the balance after the debit.
  const result = { ...outcome, gtin, creditsConsumed: deps.creditCost, creditsRemaining: await store.availableCredits(organizationId, clock.now()) };
  const idempotency = await input.recordAnswer?.(result);
  await store.commitReservation(reservation.reservationId, { gtin, description: `Price look-up ${gtin}`, now: clock.now(), idempotency });
  return result;
}
