import type { TSchema } from "@sinclair/typebox";
import { t } from "elysia";
import { IdempotencyKeyHeader } from "../../http/idempotency";
import { Int, MoneySchema, ProblemSchema, problemExample, problemsWithMeta, Timestamp } from "../../http/model";
import type { ProblemSlug } from "../../http/problem";

export const REASONS = [
  "fresh-offer",
  "invalid-gtin",
  "product-not-found",
  "no-data",
  "stale-data",
  "insufficient-credits",
  "unauthorized",
  "invalid-parameter",
  "rate-limited",
  "idempotency-conflict",
  "unavailable",
] as const;
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
export const PriceProblem = problemsWithMeta(PriceMeta, (slug) => ({ ...EXAMPLE_META, billable: false, creditsConsumed: 0, ...METAS[slug] }));

export type PriceMetaValue = typeof PriceMeta.static;
export type PriceDataValue = typeof PriceData.static;

// --- the batch look-up: POST /products/prices ---

export const MAX_BATCH_GTINS = 100;
/** The reasons an item of a batch can have: the six reason codes of the data endpoint (insufficient-credits refuses the whole batch). */
export const ITEM_REASONS = ["fresh-offer", "invalid-gtin", "product-not-found", "no-data", "stale-data", "insufficient-credits"] as const;
export type ItemReason = (typeof ITEM_REASONS)[number];

export const BatchBody = t.Object(
  {
    gtins: t.Array(t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }), {
      minItems: 1,
      maxItems: MAX_BATCH_GTINS,
      description: "1 to 100 GTINs, answered in this order; one asked twice (in any of its forms) is billed once",
    }),
    language: t.Optional(t.UnionEnum(["en", "fr"], { description: "Response language (default: Accept-Language, then `en`)" })),
  },
  // Documented here, checked by the service after authentication (the data endpoint's order of evaluation), so its problems carry meta.
  { noValidate: true },
);

const ReasonCounts = t.Object(Object.fromEntries(ITEM_REASONS.map((reason) => [reason, Int({ minimum: 0 })])) as Record<ItemReason, ReturnType<typeof Int>>, {
  description: "How many items of the answer have each reason",
});

export const BatchMeta = t.Object({
  requestId: t.String({ examples: ["req_0mwrd57q90000brqra5jtuxfecebe"] }),
  facet: t.Literal("product.price"),
  billable: t.Boolean(),
  creditsConsumed: Int({ minimum: 0, description: "CREDIT_COST × the distinct GTINs answered `fresh-offer`" }),
  creditsRemaining: Int({ minimum: 0, description: "Available balance after this request" }),
  responseTimeMs: Int({ minimum: 0 }),
  itemCount: Int({ minimum: 0, description: "Items in `data`: the GTINs as asked" }),
  reasons: ReasonCounts,
});

const ItemProblem = t.Object(
  {
    type: t.String({ format: "uri" }),
    title: t.String(),
    status: Int(),
    detail: t.String(),
  },
  { description: "Why this item has no `data` (RFC 9457 members): invalid-gtin (400) or product-not-found (404)" },
);

export const BatchItem = t.Union([
  t.Object({
    input: t.String({ description: "The GTIN as given" }),
    gtin: t.String({ description: "Normalized GTIN-14", examples: ["04006381333931"] }),
    reason: t.UnionEnum(["fresh-offer", "no-data", "stale-data"]),
    data: PriceData,
  }),
  t.Object({
    input: t.String({ description: "The GTIN as given" }),
    gtin: t.String({ description: "Normalized GTIN-14, or the value as given when it is not a GTIN" }),
    reason: t.UnionEnum(["invalid-gtin", "product-not-found"]),
    problem: ItemProblem,
  }),
]);

const EXAMPLE_BATCH_META = {
  requestId: "req_0mwrd57q90000brqra5jtuxfecebe",
  facet: "product.price",
  billable: true,
  creditsConsumed: 1,
  creditsRemaining: 41,
  responseTimeMs: 3,
  itemCount: 2,
  reasons: { "fresh-offer": 1, "invalid-gtin": 1, "product-not-found": 0, "no-data": 0, "stale-data": 0, "insufficient-credits": 0 },
} as const;

export const BatchEnvelope = t.Object(
  { meta: BatchMeta, data: t.Array(BatchItem) },
  {
    description: "One item per GTIN asked, in the order asked; only the distinct `fresh-offer` GTINs are billed",
    // Documented, not checked per response: the service writes the body from data serialized once per product.
    noValidate: true,
    examples: [
      {
        meta: EXAMPLE_BATCH_META,
        data: [
          { input: "4006381333931", gtin: "04006381333931", reason: "fresh-offer", data: envelopeOptions.examples[0]!.data },
          {
            input: "123",
            gtin: "123",
            reason: "invalid-gtin",
            problem: {
              type: "http://localhost:8080/problems/invalid-gtin",
              title: "Invalid GTIN",
              status: 400,
              detail: "The GTIN must be 8, 12, 13 or 14 digits with a valid check digit.",
            },
          },
        ],
      },
    ],
  },
);

/** Problem details of the batch look-up: its meta, with the reason that refused the whole batch. */
export function BatchProblem(slugs: ProblemSlug[]) {
  const reasonOf: Partial<Record<ProblemSlug, Reason>> = {
    "invalid-body": "invalid-parameter",
    "unprocessable-body": "invalid-parameter",
    conflict: "idempotency-conflict",
  };
  return t.Composite(
    [
      ProblemSchema,
      t.Object({ meta: t.Composite([BatchMeta, t.Object({ reason: t.UnionEnum(REASONS, { description: "Why the whole batch was refused" }) })]) }),
    ],
    {
      additionalProperties: true,
      description: `Problem details with the request's billing meta: ${slugs.join(", ")}`,
      examples: slugs.map((slug) =>
        problemExample(slug, {
          meta: {
            ...EXAMPLE_BATCH_META,
            billable: false,
            creditsConsumed: 0,
            itemCount: 0,
            reasons: { ...EXAMPLE_BATCH_META.reasons, "fresh-offer": 0, "invalid-gtin": 0 },
            reason: reasonOf[slug] ?? slug,
          },
        }),
      ),
      "x-problem-types": slugs,
    },
  );
}

export type BatchMetaValue = typeof BatchMeta.static;
export type BatchItemValue = typeof BatchItem.static;

/** The headers of a billed look-up, documented here and checked by its handler after the key (noValidate). */
export const LookupHeaders = t.Object(
  {
    "accept-language": t.Optional(t.String({ description: "Used when `language` is absent: en or fr" })),
    "idempotency-key": IdempotencyKeyHeader,
  },
  { noValidate: true },
);

/** The problems of a billed look-up by status, each with the endpoint's billing meta (`problems`). */
export function lookupErrors(problems: (slugs: ProblemSlug[]) => TSchema) {
  return {
    400: problems(["invalid-gtin", "invalid-parameter"]),
    401: problems(["unauthorized"]),
    402: problems(["insufficient-credits"]),
    404: problems(["product-not-found"]),
    409: problems(["conflict"]),
    422: problems(["unprocessable-body"]),
    429: problems(["rate-limited"]),
    503: problems(["unavailable"]),
  };
}
