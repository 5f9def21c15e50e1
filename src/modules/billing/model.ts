import type { TLiteral, TUnion } from "@sinclair/typebox";
import { t } from "elysia";
import { Int, MoneySchema, PageQuery, pageOf, Timestamp } from "../../http/model";

export const TRANSACTION_TYPES = ["purchase", "subscription", "grant", "trial", "usage", "expiry", "refund", "adjustment"] as const;

/**
 * An enum of string literals. Not t.UnionEnum: Elysia gives that one a default (its first value),
 * which silently fills an absent optional query parameter.
 */
export function oneOf<const T extends readonly string[]>(values: T, options: { description?: string } = {}): TUnion<Literals<T>> {
  return t.Union(values.map((value) => t.Literal(value)) as unknown as Literals<T>, options) as unknown as TUnion<Literals<T>>;
}

type Literals<T extends readonly string[]> = { -readonly [K in keyof T]: TLiteral<T[K]> };

const Id = (prefix: string, example: string) => t.String({ pattern: `^${prefix}_`, examples: [example] });
const ItemId = t.String({ examples: ["pack-10k"] });
const Language = t.Optional(oneOf(["en", "fr"], { description: "Language of `formatted` money (default: Accept-Language, then `en`)" }));
const ReturnURL = (description: string) => t.Optional(t.String({ pattern: "^https?://[^\\s]+$", maxLength: 2000, description }));

export const CatalogResponse = t.Object({
  creditCost: Int({ minimum: 1, description: "Credits per billed look-up" }),
  freshnessWindowSeconds: Int({ minimum: 1 }),
  packs: t.Array(
    t.Object({
      id: ItemId,
      name: t.String({ examples: ["10,000 credits"] }),
      credits: Int({ minimum: 1 }),
      price: MoneySchema,
      validityDays: t.Union([Int({ minimum: 1 }), t.Null()], { description: "Days the credits stay spendable; null: they never expire" }),
    }),
  ),
  plans: t.Array(
    t.Object({
      id: t.String({ examples: ["pro-monthly"] }),
      name: t.String({ examples: ["Pro"] }),
      creditsPerPeriod: Int({ minimum: 1, description: "Granted at the start of each period, expiring at its end" }),
      interval: oneOf(["month", "year"]),
      price: MoneySchema,
    }),
  ),
});

export const BucketSchema = t.Object({
  id: Id("bkt", "bkt_0mwrd57q90000brqra5jtuxfecebe"),
  source: oneOf(["pack", "subscription", "grant", "trial"]),
  granted: Int({ minimum: 0 }),
  remaining: Int({ minimum: 0 }),
  expiresAt: t.Union([Timestamp, t.Null()]),
  createdAt: Timestamp,
});

export const BalanceResponse = t.Object({
  available: Int({ minimum: 0, description: "Spendable now" }),
  reserved: Int({
    minimum: 0,
    description: "Held by requests in flight, and on PostgreSQL with several instances leased for a few seconds by the other instances",
  }),
  buckets: t.Array(BucketSchema, { description: "Buckets that still hold credits, in spending order: soonest-expiring first, never-expiring last" }),
});

export const TransactionSchema = t.Object({
  id: Id("txn", "txn_0mwrd57q90000brqra5jtuxfecebe"),
  type: oneOf(TRANSACTION_TYPES),
  amount: Int({ description: "Signed: credits in are positive, credits out negative" }),
  balanceAfter: Int({ description: "Sum of all amounts up to and including this one (available + reserved)" }),
  bucketId: t.Union([t.String(), t.Null()]),
  keyId: t.Union([t.String(), t.Null()]),
  requestId: t.Union([t.String(), t.Null()]),
  gtin: t.Union([t.String(), t.Null()]),
  description: t.String(),
  createdAt: Timestamp,
});

export const TransactionsQuery = t.Object({
  ...PageQuery,
  type: t.Optional(oneOf(TRANSACTION_TYPES, { description: "Only transactions of this type" })),
  from: t.Optional(t.String({ format: "date-time", description: "Only transactions at or after this instant (ISO 8601)" })),
  to: t.Optional(t.String({ format: "date-time", description: "Only transactions before this instant (ISO 8601, exclusive)" })),
  format: t.Optional(
    oneOf(["json", "csv"], {
      description:
        "`csv`: the whole selection as a CSV download, whatever Accept says; `json`: a page of JSON. Default: by Accept (text/csv or application/json), else JSON",
    }),
  ),
});

export const InvoiceSchema = t.Object({
  id: t.String({ examples: ["inv_0mwrd57q90000brqra5jtuxfecebe"], description: "`inv_…` for local invoices, Stripe's `in_…` with Stripe" }),
  number: t.Union([t.String({ examples: ["INV-000042"] }), t.Null()], { description: "Null only for a Stripe draft" }),
  status: oneOf(["draft", "open", "paid", "void"]),
  total: MoneySchema,
  createdAt: Timestamp,
  hostedUrl: t.Union([t.String(), t.Null()]),
  pdfUrl: t.Union([t.String(), t.Null()]),
});

export const InvoicesQuery = t.Object({ ...PageQuery, language: Language });
export const LanguageQuery = t.Object({ language: Language });

export const PackCheckoutBody = t.Object({
  packId: t.String({ minLength: 1, maxLength: 64, examples: ["pack-10k"] }),
  successUrl: ReturnURL("Where the customer lands after paying"),
  cancelUrl: ReturnURL("Where the customer lands after giving up"),
});

export const SubscriptionCheckoutBody = t.Object({
  planId: t.String({ minLength: 1, maxLength: 64, examples: ["pro-monthly"] }),
  successUrl: ReturnURL("Where the customer lands after paying"),
  cancelUrl: ReturnURL("Where the customer lands after giving up"),
});

export const CheckoutResponse = t.Object({
  checkoutId: Id("ord", "ord_0mwrd57q90000brqra5jtuxfecebe"),
  checkoutUrl: t.String({ description: "Send the customer's browser here" }),
});

export const PortalBody = t.Optional(t.Object({ returnUrl: ReturnURL("Where the portal's back link leads") }));
export const PortalResponse = t.Object({ url: t.String({ description: "Send the customer's browser here" }) });

export const WebhookResponse = t.Object({
  received: t.Literal(true),
  applied: t.Boolean({ description: "False for replays and events that change nothing here" }),
});

export { pageOf };

export const USAGE_GRANULARITIES = ["hour", "day"] as const;
export const USAGE_GROUPINGS = ["reason", "key"] as const;

export const UsageQuery = t.Object({
  from: t.Optional(
    t.String({
      format: "date-time",
      description: "Start of the range (ISO 8601), moved back to the start of its hour or UTC day. Default: 30 days (day) or 24 hours (hour) before `to`",
    }),
  ),
  to: t.Optional(
    t.String({
      format: "date-time",
      description: "End of the range (ISO 8601, exclusive), moved forward to the end of its hour or UTC day. Default: the end of the current period",
    }),
  ),
  granularity: t.Optional(
    oneOf(USAGE_GRANULARITIES, { description: "Period length: `hour` (at most 31 days) or `day` (UTC days, at most 366); default `day`" }),
  ),
  groupBy: t.Optional(oneOf(USAGE_GROUPINGS, { description: "`reason` (default): each period by reason; `key`: each period also split per API key" })),
});

const ReasonCounts = t.Record(t.String(), Int({ minimum: 0 }), {
  description:
    "Requests per reason code (`fresh-offer` is billed; every other reason is not; `replayed` is an Idempotency-Key replay), and `price-watch`: the `price.changed` events of price watches, each billed. Reasons with no request are absent",
  examples: [{ "fresh-offer": 120, "no-data": 4 }],
});

const UsageFigures = {
  requests: Int({
    minimum: 0,
    description: "Data requests answered to a key of the organization, billed or not, and price watch events (reason `price-watch`)",
  }),
  billedRequests: Int({ minimum: 0, description: "Requests that consumed credits (reason `fresh-offer`)" }),
  creditsConsumed: Int({ minimum: 0, description: "Credits debited: equal to the ledger's usage rows of the period" }),
  reasons: ReasonCounts,
};

export const UsageResponse = t.Object({
  from: Timestamp,
  to: Timestamp,
  granularity: oneOf(USAGE_GRANULARITIES),
  groupBy: oneOf(USAGE_GROUPINGS),
  totals: t.Object(UsageFigures),
  periods: t.Array(
    t.Object({
      start: Timestamp,
      end: Timestamp,
      ...UsageFigures,
      keys: t.Optional(
        t.Array(t.Object({ keyId: t.Union([t.String(), t.Null()]), ...UsageFigures }), {
          description: "With `groupBy=key`: the keys that made requests in the period",
        }),
      ),
    }),
    { description: "Every period of the range, oldest first, including those without requests" },
  ),
  keys: t.Optional(
    t.Array(t.Object({ id: t.String(), name: t.String(), keyPrefix: t.String() }), { description: "With `groupBy=key`: the keys named in `periods`" }),
  ),
});
