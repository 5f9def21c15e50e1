import { t } from "elysia";
import { Int, MoneySchema, ProblemSchema, problemExample, Timestamp } from "../../http/model";
import type { ProblemSlug } from "../../http/problem";

export const REASONS = ["fresh-offer", "invalid-gtin", "product-not-found", "no-data", "stale-data", "insufficient-credits", "unauthorized", "invalid-parameter", "rate-limited", "idempotency-conflict", "unavailable"] as const;
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

const EXAMPLE_META = {
  requestId: "req_0mwrd57q90000brqra5jtuxfecebe",
  gtin: "04006381333931",
  facet: "product.price",
  billable: true,
  creditsConsumed: 1,
  creditsRemaining: 41,
  reason: "fresh-offer",
  responseTimeMs: 2,
} as const;

const euros = (amount: number) => ({ amount, currency: "EUR", formatted: `€${(amount / 100).toFixed(2)}` });

const envelopeOptions = {
    description: "Fresh offers (`fresh-offer`, billed), or none (`no-data`, `stale-data`, not billed)",
    examples: [
      {
        meta: EXAMPLE_META,
        data: {
          product: { gtin: "04006381333931", title: "Faber-Castell pencil", brand: "Faber-Castell", imageUrl: null },
          offers: [
            {
              merchant: { id: "m-1", name: "Papeterie Centrale" },
              price: euros(129),
              shipping: euros(490),
              availability: "in_stock",
              availabilityLabel: "In stock",
              condition: "new",
              url: "https://shop.example/pencil",
              observedAt: "2026-11-22T09:12:00.000Z",
            },
          ],
          summary: { offerCount: 1, lowestPrice: euros(129), highestPrice: euros(129) },
          lastObservedAt: "2026-11-22T09:12:00.000Z",
        },
      },
    ],
  };

export const PriceEnvelope = t.Object({ meta: PriceMeta, data: PriceData }, envelopeOptions);
/**
 * The same schema, documented but not checked per response (`noValidate`): the data endpoint writes
 * its 200 body from a `meta` it builds and a `data` serialized once per product and language.
 */
export const PriceEnvelopeUnchecked = t.Object({ meta: PriceMeta, data: PriceData }, { ...envelopeOptions, noValidate: true });

const METAS: Partial<Record<ProblemSlug, Partial<PriceMetaValue>>> = {
  "invalid-gtin": { gtin: "123", reason: "invalid-gtin" },
  "invalid-parameter": { reason: "invalid-parameter" },
  unauthorized: { reason: "unauthorized", creditsRemaining: 0 },
  "insufficient-credits": { reason: "insufficient-credits", creditsRemaining: 0 },
  "product-not-found": { reason: "product-not-found" },
  "rate-limited": { reason: "rate-limited" },
};

/** Problem details of the data endpoint: the request's billing meta is an extension member. */
export function PriceProblem(slugs: ProblemSlug[]) {
  return t.Composite([ProblemSchema, t.Object({ meta: PriceMeta })], {
    additionalProperties: true,
    description: `Problem details with the request's billing meta: ${slugs.join(", ")}`,
    examples: slugs.map((slug) => problemExample(slug, { meta: { ...EXAMPLE_META, billable: false, creditsConsumed: 0, ...METAS[slug] } })),
    "x-problem-types": slugs,
  });
}

export type PriceMetaValue = typeof PriceMeta.static;
export type PriceDataValue = typeof PriceData.static;
