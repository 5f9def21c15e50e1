import { t } from "elysia";
import { Int, MoneySchema, problemsWithMeta, Timestamp } from "../../http/model";
import type { ProblemSlug } from "../../http/problem";

export const HISTORY_REASONS = [
  "history",
  "no-data",
  "invalid-gtin",
  "product-not-found",
  "insufficient-credits",
  "unauthorized",
  "invalid-parameter",
  "rate-limited",
  "idempotency-conflict",
  "unavailable",
] as const;
export type HistoryReason = (typeof HISTORY_REASONS)[number];

/** The longest range one request may ask for, and the default one. */
export const MAX_HISTORY_RANGE_DAYS = 400;
export const DEFAULT_HISTORY_RANGE_DAYS = 30;
export const MAX_HISTORY_LIMIT = 5000;
export const DEFAULT_HISTORY_LIMIT = 1000;

export const HistoryMeta = t.Object({
  requestId: t.String({ examples: ["req_0mwrd57q90000brqra5jtuxfecebe"] }),
  gtin: t.String({ description: "Normalized GTIN-14, or the raw path value when it is not a GTIN", examples: ["04006381333931"] }),
  facet: t.Literal("product.price-history"),
  billable: t.Boolean(),
  creditsConsumed: Int({ minimum: 0, description: "HISTORY_CREDIT_COST for an answer with points (each page is an answer), else 0" }),
  creditsRemaining: Int({ minimum: 0, description: "Available balance after this request" }),
  reason: t.UnionEnum(HISTORY_REASONS, { description: "Billing decision reason code" }),
  responseTimeMs: Int({ minimum: 0 }),
});

const At = (description: string) => t.String({ format: "date-time", description, examples: ["2026-11-22T10:00:00.000Z"] });
const Merchant = t.Object({ id: t.String(), name: t.String() });
const AvailabilitySchema = t.Union([t.Literal("in_stock"), t.Literal("out_of_stock"), t.Literal("preorder"), t.Literal("unknown")]);

export const ChangePoint = t.Object(
  {
    merchant: Merchant,
    price: MoneySchema,
    shipping: t.Union([MoneySchema, t.Null()]),
    availability: AvailabilitySchema,
    availabilityLabel: t.String({ examples: ["In stock"] }),
    validFrom: At("When the offer was first observed in this state"),
    validTo: t.Union([Timestamp, t.Null()], { description: "When the next state was first observed; null while this one holds" }),
  },
  { description: "interval=change: one state of one offer and the time it held" },
);

export const DayPoint = t.Object(
  {
    merchant: Merchant,
    day: t.String({ format: "date", description: "The UTC day", examples: ["2026-11-22"] }),
    lowestPrice: MoneySchema,
    highestPrice: MoneySchema,
    // lastPrice and availability: at the end of the day (now, for today).
    lastPrice: MoneySchema,
    availability: AvailabilitySchema,
    availabilityLabel: t.String({ examples: ["In stock"] }),
  },
  { description: "interval=day: one offer on one UTC day; lowest and highest among its states of the day in the currency of the last one" },
);

export const HistoryData = t.Object({
  product: t.Object({
    gtin: t.String(),
    title: t.String(),
    brand: t.Union([t.String(), t.Null()]),
    imageUrl: t.Union([t.String(), t.Null()]),
  }),
  interval: t.UnionEnum(["change", "day"]),
  from: At("Start of the range asked (inclusive)"),
  to: At("End of the range asked (exclusive)"),
  points: t.Array(t.Union([ChangePoint, DayPoint]), {
    description: "change: ordered by validFrom, then merchant id; day: by day, then merchant id. Every point is of the interval asked.",
  }),
  nextCursor: t.Union([t.String(), t.Null()], { description: "Pass as `cursor` (same query otherwise) for the next page; null on the last page" }),
});

const euros = (amount: number) => ({ amount, currency: "EUR", formatted: `€${(amount / 100).toFixed(2)}` });

const EXAMPLE_META = {
  requestId: "req_0mwrd57q90000brqra5jtuxfecebe",
  gtin: "04006381333931",
  facet: "product.price-history",
  billable: true,
  creditsConsumed: 2,
  creditsRemaining: 40,
  reason: "history",
  responseTimeMs: 3,
} as const;

export const HistoryEnvelope = t.Object(
  { meta: HistoryMeta, data: HistoryData },
  {
    description: "The points of the range (`history`, billed), or none (`no-data`, not billed)",
    // Documented, not checked per response: the handler builds the body from typed parts.
    noValidate: true,
    examples: [
      {
        meta: EXAMPLE_META,
        data: {
          product: { gtin: "04006381333931", title: "Faber-Castell pencil", brand: "Faber-Castell", imageUrl: null },
          interval: "day",
          from: "2026-11-20T00:00:00.000Z",
          to: "2026-11-22T00:00:00.000Z",
          points: [
            {
              merchant: { id: "m-1", name: "Papeterie Centrale" },
              day: "2026-11-20",
              lowestPrice: euros(129),
              highestPrice: euros(139),
              lastPrice: euros(129),
              availability: "in_stock",
              availabilityLabel: "In stock",
            },
            {
              merchant: { id: "m-1", name: "Papeterie Centrale" },
              day: "2026-11-21",
              lowestPrice: euros(119),
              highestPrice: euros(129),
              lastPrice: euros(119),
              availability: "in_stock",
              availabilityLabel: "In stock",
            },
          ],
          nextCursor: null,
        },
      },
    ],
  },
);

const METAS: Partial<Record<ProblemSlug, Partial<HistoryMetaValue>>> = {
  "invalid-gtin": { gtin: "123", reason: "invalid-gtin" },
  "invalid-parameter": { reason: "invalid-parameter" },
  unauthorized: { reason: "unauthorized", creditsRemaining: 0 },
  "insufficient-credits": { reason: "insufficient-credits", creditsRemaining: 0 },
  "product-not-found": { reason: "product-not-found" },
  "rate-limited": { reason: "rate-limited" },
  conflict: { reason: "idempotency-conflict" },
  "unprocessable-body": { reason: "idempotency-conflict" },
  unavailable: { reason: "unavailable" },
};

/** Problem details of the history endpoint: the request's billing meta is an extension member. */
export const HistoryProblem = problemsWithMeta(HistoryMeta, (slug) => ({ ...EXAMPLE_META, billable: false, creditsConsumed: 0, ...METAS[slug] }));

export type HistoryMetaValue = typeof HistoryMeta.static;
export type HistoryDataValue = typeof HistoryData.static;
export type ChangePointValue = typeof ChangePoint.static;
export type DayPointValue = typeof DayPoint.static;
