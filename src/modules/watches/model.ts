import { t } from "elysia";
import { Int, PageQuery, pageOf, Timestamp } from "../../http/model";

const Threshold = t.Object(
  {
    amount: Int({ minimum: 0, maximum: 1_000_000_000_000, description: "In minor units of the currency (cents), as prices are" }),
    currency: t.String({ pattern: "^[A-Z]{3}$", description: "ISO 4217", examples: ["EUR"] }),
  },
  { description: "The threshold of a `below` watch" },
);

const Trigger = t.Union([t.Literal("any-change"), t.Literal("price-drop"), t.Literal("below")], {
  description: "any-change: any change of price or availability; price-drop: the price goes down; below: the price crosses under `below` (once per crossing)",
});

export const WatchSchema = t.Object(
  {
    id: t.String({ examples: ["wch_0mwrd57q90000brqra5jtuxfe"] }),
    gtin: t.String({ description: "The product's GTIN-14", examples: ["04006381333931"] }),
    merchant: t.Union([t.String(), t.Null()], { description: "The watched merchant's offer; null: the product's best fresh price across merchants" }),
    trigger: Trigger,
    below: t.Union([Threshold, t.Null()]),
    status: t.Union([t.Literal("active"), t.Literal("paused")], { description: "paused: no events until the organization has credits again" }),
    pausedReason: t.Union([t.Literal("insufficient-credits"), t.Null()]),
    createdAt: Timestamp,
    lastTriggeredAt: t.Union([Timestamp, t.Null()], { description: "When it last sent a `price.changed` event" }),
  },
  { description: "A price watch" },
);

export const WatchPageSchema = pageOf(WatchSchema);

export const CreateWatchBody = t.Object({
  gtin: t.String({ minLength: 1, maxLength: 20, description: "GTIN-8, -12, -13 or -14; stored as its GTIN-14", examples: ["4006381333931"] }),
  merchant: t.Optional(t.String({ minLength: 1, maxLength: 100, description: "A merchant id: watch that merchant's offer only", examples: ["m1"] })),
  trigger: Trigger,
  below: t.Optional(Threshold),
});

export const WatchParams = t.Object({ id: t.String({ maxLength: 100, description: "Watch id", examples: ["wch_0mwrd57q90000brqra5jtuxfe"] }) });

export const WatchListQuery = t.Object({
  limit: PageQuery.limit,
  cursor: t.Optional(t.String({ pattern: "^wch_[0-9a-z]{1,60}$", description: "Opaque cursor from nextCursor" })),
});

const WatchState = t.Object({
  merchant: t.Union([t.String(), t.Null()], { description: "The merchant whose offer this is (the best one for a watch without a merchant)" }),
  price: t.Union([t.Object({ amount: Int(), currency: t.String() }), t.Null()], {
    description: "Minor units; null when there is no offer (no fresh offer for a watch without a merchant)",
  }),
  availability: t.Union([t.String(), t.Null()]),
  observedAt: t.Union([Timestamp, t.Null()]),
});

/** What a `price.changed` event carries under `data` (documented as a schema component). */
export const PriceChangedEventSchema = t.Object(
  {
    organizationId: t.String(),
    watchId: t.String({ examples: ["wch_0mwrd57q90000brqra5jtuxfe"] }),
    gtin: t.String({ examples: ["04006381333931"] }),
    merchant: t.Union([t.String(), t.Null()]),
    trigger: Trigger,
    below: t.Union([Threshold, t.Null()]),
    previous: WatchState,
    current: WatchState,
  },
  { description: "The `data` of a `price.changed` webhook event, sent through the webhook endpoints subscribed to `price.changed`" },
);
