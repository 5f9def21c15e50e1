import { t } from "elysia";
import { Int, MoneySchema, ProblemSchema, Timestamp } from "../../http/model";

export const REASONS = ["fresh-offer", "invalid-gtin", "product-not-found", "no-data", "stale-data", "insufficient-credits", "unauthorized", "invalid-parameter", "rate-limited", "idempotency-conflict"] as const;
export type Reason = (typeof REASONS)[number];

export const PriceMeta = t.Object({
  requestId: t.String({ examples: ["req_0mwrd57q90000brqra5jtuxfecebe"] }),
  gtin: t.String({ description: "Normalized GTIN-14, or the raw path value when it is not a GTIN", examples: ["04006381333931"] }),
  facet: t.Literal("product.price"),
  billable: t.Boolean(),
  creditsConsumed: Int({ minimum: 0 }),
  creditsRemaining: Int({ minimum: 0, description: "Available balance after this request" }),
  reason: t.UnionEnum(REASONS, { description: "Billing decision reason code" }),
  responseTimeMs: Int({ minimum: 0 }),
});

export const Offer = t.Object({
  merchant: t.Object({ id: t.String(), name: t.String() }),
  price: MoneySchema,
  shipping: t.Union([MoneySchema, t.Null()]),
  availability: t.Union([t.Literal("in_stock"), t.Literal("out_of_stock"), t.Literal("preorder"), t.Literal("unknown")]),
  availabilityLabel: t.String({ examples: ["In stock"] }),
  condition: t.Union([t.Literal("new"), t.Literal("used"), t.Literal("refurbished")]),
  url: t.Union([t.String(), t.Null()]),
  observedAt: Timestamp,
});

export const PriceData = t.Object({
  product: t.Object({
    gtin: t.String(),
    title: t.String(),
    brand: t.Union([t.String(), t.Null()]),
    imageUrl: t.Union([t.String(), t.Null()]),
  }),
  offers: t.Array(Offer, { description: "Fresh offers, cheapest first" }),
  summary: t.Object({
    offerCount: Int({ minimum: 0 }),
    lowestPrice: t.Union([MoneySchema, t.Null()]),
    highestPrice: t.Union([MoneySchema, t.Null()]),
  }),
  lastObservedAt: t.Union([Timestamp, t.Null()]),
});

export const PriceEnvelope = t.Object({ meta: PriceMeta, data: PriceData });

export const PriceProblem = t.Composite([ProblemSchema, t.Object({ meta: PriceMeta })], {
  additionalProperties: true,
  description: "Problem details with the request's billing meta as an extension member",
});

export type PriceMetaValue = typeof PriceMeta.static;
export type PriceDataValue = typeof PriceData.static;
