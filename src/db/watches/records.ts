// Price watches as both stores keep them, and the rules that decide when one fires: pure functions,
// so the SQLite and the PostgreSQL evaluator apply them alike.
import type { Debit } from "../ledger/debit-plan";
import { utcMonth } from "../../lib/clock";
import { newId } from "../../lib/ids";
import type { NewWebhookEvent } from "../webhooks/records";

export const WATCH_TRIGGERS = ["any-change", "price-drop", "below"] as const;
export type WatchTrigger = (typeof WATCH_TRIGGERS)[number];
export type WatchStatus = "active" | "paused";
/** Why a watch is paused: its organization could not pay for an event. */
export type WatchPausedReason = "insufficient-credits";

/** What a watch sees of an offer (or of the product's best fresh offer): all null when there is none. */
export interface WatchState {
  merchantId: string | null;
  price: number | null;
  currency: string | null;
  availability: string | null;
  observedAt: number | null;
}

export const NO_STATE: WatchState = { merchantId: null, price: null, currency: null, availability: null, observedAt: null };

export interface PriceWatch {
  id: string;
  organizationId: string;
  gtin: string;
  merchantId: string | null;
  trigger: WatchTrigger;
  below: { amount: number; currency: string } | null;
  status: WatchStatus;
  pausedReason: WatchPausedReason | null;
  createdAt: number;
  lastTriggeredAt: number | null;
}

/** A watch with what the evaluator keeps: the state it last saw and the `below` trigger's arming. */
export interface WatchRow extends PriceWatch {
  armed: boolean;
  last: WatchState;
}

/** The watch as the API shows it, without the evaluator's state. */
export function publicWatch(row: WatchRow): PriceWatch {
  const { armed: _armed, last: _last, ...watch } = row;
  return watch;
}

export interface NewWatch {
  id: string;
  organizationId: string;
  gtin: string;
  merchantId: string | null;
  trigger: WatchTrigger;
  below: { amount: number; currency: string } | null;
  now: number;
}

/** `limit` reached: the organization already has that many watches and none was created. */
export type CreateWatchResult = { ok: true; watch: PriceWatch } | { ok: false; limit: number };

/** One evaluator run's settings. */
export interface WatchBatchInput {
  now: number;
  /** Queued changes evaluated in this transaction at most. */
  limit: number;
  /** Credits each event costs (WATCH_EVENT_CREDIT_COST). */
  creditCost: number;
  freshnessWindowMs: number;
}

/** What one evaluator run did. */
export interface WatchBatchResult {
  /** Queued changes consumed. */
  changes: number;
  /** Events written (each billed). */
  events: number;
  /** Watches paused for want of credits. */
  paused: number;
  /** Watches resumed because their organization has credits again. */
  resumed: number;
}

/** An offer as the evaluator reads it. */
export interface OfferState {
  gtin: string;
  merchantId: string;
  price: number;
  currency: string;
  availability: string;
  observedAt: number;
}

/**
 * The state a watch sees now: the watched merchant's offer, or without a merchant the product's
 * best fresh offer (the cheapest observed within the freshness window, the lower merchant id on a tie).
 */
export function currentState(watch: { merchantId: string | null }, offers: OfferState[], now: number, freshnessWindowMs: number): WatchState {
  let chosen: OfferState | undefined;
  if (watch.merchantId !== null) chosen = offers.find((offer) => offer.merchantId === watch.merchantId);
  else {
    for (const offer of offers) {
      if (now - offer.observedAt > freshnessWindowMs) continue;
      if (chosen === undefined || offer.price < chosen.price || (offer.price === chosen.price && offer.merchantId < chosen.merchantId)) chosen = offer;
    }
  }
  return chosen === undefined
    ? NO_STATE
    : { merchantId: chosen.merchantId, price: chosen.price, currency: chosen.currency, availability: chosen.availability, observedAt: chosen.observedAt };
}

/** Whether a state is under a `below` watch's threshold (same currency, strictly lower). */
export function isBelow(watch: { below: { amount: number; currency: string } | null }, state: WatchState): boolean {
  return watch.below !== null && state.price !== null && state.currency === watch.below.currency && state.price < watch.below.amount;
}

/** The arming a new watch starts with: a `below` watch created under its threshold waits for the price to go back up first. */
export function initialArming(watch: { trigger: WatchTrigger; below: { amount: number; currency: string } | null }, state: WatchState): boolean {
  return !(watch.trigger === "below" && isBelow(watch, state));
}

/**
 * Whether a watch fires on the move from `last` to `current`, and its arming after it:
 * `any-change` on any change of price, currency or availability; `price-drop` when the price goes
 * down (in the same currency); `below` when it crosses under the threshold while armed, re-arming
 * once it is back at or above it.
 */
export function evaluateWatch(watch: Pick<WatchRow, "trigger" | "below" | "armed">, last: WatchState, current: WatchState): { fires: boolean; armed: boolean } {
  switch (watch.trigger) {
    case "any-change":
      return { fires: last.price !== current.price || last.currency !== current.currency || last.availability !== current.availability, armed: watch.armed };
    case "price-drop":
      return { fires: last.price !== null && current.price !== null && last.currency === current.currency && current.price < last.price, armed: watch.armed };
    case "below": {
      const below = isBelow(watch, current);
      return { fires: watch.armed && below, armed: !below };
    }
  }
}

/** Whether the evaluator has anything to write for a watch: its state or arming moved. */
export function stateMoved(watch: WatchRow, current: WatchState, armed: boolean): boolean {
  return (
    armed !== watch.armed ||
    watch.last.merchantId !== current.merchantId ||
    watch.last.price !== current.price ||
    watch.last.currency !== current.currency ||
    watch.last.availability !== current.availability ||
    watch.last.observedAt !== current.observedAt
  );
}

/** A watch state as a `price.changed` event writes it (`previous`, `current`). */
export function stateJSON(state: WatchState): Record<string, unknown> {
  return {
    merchant: state.merchantId,
    price: state.price === null ? null : { amount: state.price, currency: state.currency },
    availability: state.availability,
    observedAt: state.observedAt === null ? null : new Date(state.observedAt).toISOString(),
  };
}

/** The data of a `price.changed` event. */
export function priceChangedData(watch: PriceWatch, previous: WatchState, current: WatchState): Record<string, unknown> {
  return {
    organizationId: watch.organizationId,
    watchId: watch.id,
    gtin: watch.gtin,
    merchant: watch.merchantId,
    trigger: watch.trigger,
    below: watch.below,
    previous: stateJSON(previous),
    current: stateJSON(current),
  };
}

/** The ledger text of a watch event's debit. */
export function watchEventDescription(gtin: string): string {
  return `Price watch event ${gtin}`;
}

/** The reason watch events are counted under in the usage counters. */
export const WATCH_USAGE_REASON = "price-watch";

/** A fired watch: its event and the debit that pays for it (the debit plan's input), in one. */
export interface FiredWatch {
  watch: WatchRow;
  current: WatchState;
  event: NewWebhookEvent;
  debit: Debit;
}

/** The event and debit of a watch that fires now; the debit's request id is the event's id, which ties the ledger row to the event. */
export function fireWatch(watch: WatchRow, current: WatchState, input: { now: number; creditCost: number }): FiredWatch {
  const eventId = newId("msg", input.now);
  return {
    watch,
    current,
    event: {
      id: eventId,
      organizationId: watch.organizationId,
      type: "price.changed",
      data: priceChangedData(watch, watch.last, current),
      createdAt: input.now,
    },
    debit: {
      reservationId: eventId,
      transactionId: newId("txn", input.now),
      organizationId: watch.organizationId,
      amount: input.creditCost,
      keyId: null,
      requestId: eventId,
      gtin: watch.gtin,
      description: watchEventDescription(watch.gtin),
      createdAt: input.now,
      month: utcMonth(input.now),
      items: 1,
    },
  };
}

/** Watch ids sort by creation, so the list pages on the id alone (newest first). */
export function isWatchCursor(cursor: string): boolean {
  return /^wch_[0-9a-z]{1,60}$/.test(cursor);
}

/** A watch's row as the evaluator leaves it. */
export interface WatchUpdate {
  id: string;
  state: WatchState;
  armed: boolean;
  /** Set when the watch's event was written (and billed). */
  triggeredAt: number | null;
}

/**
 * The first half of an evaluator run: every watch of the changed products against the offers as
 * they are now. A paused watch follows the state without firing, so it resumes from the present.
 */
export function evaluateWatches(
  watches: WatchRow[],
  offers: OfferState[],
  input: { now: number; creditCost: number; freshnessWindowMs: number },
): { fired: FiredWatch[]; moved: WatchUpdate[] } {
  const byGTIN = new Map<string, OfferState[]>();
  for (const offer of offers) {
    const list = byGTIN.get(offer.gtin);
    if (list === undefined) byGTIN.set(offer.gtin, [offer]);
    else list.push(offer);
  }
  const fired: FiredWatch[] = [];
  const moved: WatchUpdate[] = [];
  for (const watch of watches) {
    const current = currentState(watch, byGTIN.get(watch.gtin) ?? [], input.now, input.freshnessWindowMs);
    const { fires, armed } = evaluateWatch(watch, watch.last, current);
    if (fires && watch.status === "active") fired.push(fireWatch(watch, current, input));
    else if (stateMoved(watch, current, armed)) moved.push({ id: watch.id, state: current, armed, triggeredAt: null });
  }
  return { fired, moved };
}

/**
 * The second half, once the debit is planned over the fired watches' organizations (planDebits):
 * the events of the billed watches, their rows, and the organizations whose credits ran out. A
 * watch that fired but could not be paid still takes the new state (its event is not owed later);
 * its organization's watches are paused.
 */
export function settleWatches(
  fired: FiredWatch[],
  committed: Set<string>,
  now: number,
): { events: NewWebhookEvent[]; updates: WatchUpdate[]; unpaid: string[] } {
  const events: NewWebhookEvent[] = [];
  const updates: WatchUpdate[] = [];
  const unpaid = new Set<string>();
  for (const { watch, current, event, debit } of fired) {
    const paid = committed.has(debit.reservationId);
    if (paid) events.push(event);
    else unpaid.add(watch.organizationId);
    const { armed } = evaluateWatch(watch, watch.last, current);
    updates.push({ id: watch.id, state: current, armed, triggeredAt: paid ? now : null });
  }
  return { events, updates, unpaid: [...unpaid].sort() };
}
