// What the simulations check of price watches after an evaluator run, on either store.
import type { Store } from "../../src/db/store";
import { currentState, stateJSON, type WatchState } from "../../src/db/watches/records";
import { queryRows } from "../support/context";

/** A watch state as a `price.changed` event writes it, so a stored state and an event's compare as text. */
function stateText(state: WatchState): string {
  return JSON.stringify(stateJSON(state));
}

/** Every watch's status and stored state (as stateText writes it; `offer` leaves out when the offer was observed). */
export async function storedWatchStates(store: Store): Promise<Map<string, { status: string; state: string; offer: string }>> {
  const rows = await queryRows<{
    id: string;
    status: string;
    last_merchant_id: string | null;
    last_price: number | null;
    last_currency: string | null;
    last_availability: string | null;
    last_observed_at: number | null;
  }>(store, "SELECT id, status, last_merchant_id, last_price, last_currency, last_availability, last_observed_at FROM price_watches");
  return new Map(
    rows.map((row) => {
      const state: WatchState = {
        merchantId: row.last_merchant_id,
        price: row.last_price === null ? null : Number(row.last_price),
        currency: row.last_currency,
        availability: row.last_availability,
        observedAt: row.last_observed_at === null ? null : Number(row.last_observed_at),
      };
      return [row.id, { status: row.status, state: stateText(state), offer: stateText({ ...state, observedAt: null }) }];
    }),
  );
}

/**
 * The watches, paused or active, whose product has no change queued but whose stored offer (merchant,
 * price, availability) is not what the product's offers give now: a paused watch follows the prices
 * without firing, so it never fires later for a change made while it was paused. (An import that
 * only observes the same offer again queues no change, so the time it was observed may lag.)
 */
export async function watchesBehindOffers(store: Store, now: number, freshnessWindowMs: number): Promise<string[]> {
  const queued = new Set((await queryRows<{ gtin: string }>(store, "SELECT DISTINCT gtin FROM watch_changes")).map((row) => row.gtin));
  const offers = (
    await queryRows<{ gtin: string; merchant_id: string; price_amount: number; currency: string; availability: string; observed_at: number }>(
      store,
      "SELECT gtin, merchant_id, price_amount, currency, availability, observed_at FROM offers",
    )
  ).map((row) => ({
    gtin: row.gtin,
    merchantId: row.merchant_id,
    price: Number(row.price_amount),
    currency: row.currency,
    availability: row.availability,
    observedAt: Number(row.observed_at),
  }));
  const watches = await queryRows<{ id: string; gtin: string; merchant_id: string | null }>(store, "SELECT id, gtin, merchant_id FROM price_watches");
  const stored = await storedWatchStates(store);
  const behind: string[] = [];
  for (const watch of watches) {
    if (queued.has(watch.gtin)) continue;
    const ofProduct = offers.filter((offer) => offer.gtin === watch.gtin);
    const expected = stateText({ ...currentState({ merchantId: watch.merchant_id }, ofProduct, now, freshnessWindowMs), observedAt: null });
    const { status, offer } = stored.get(watch.id)!;
    if (offer !== expected) behind.push(`${status} watch ${watch.id} holds ${offer}, but its product's offers give ${expected}`);
  }
  return behind;
}
