import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { CommonErrors } from "../../http/model";
import { LookupHeaders, lookupErrors } from "../products/model";
import { DEFAULT_HISTORY_LIMIT, DEFAULT_HISTORY_RANGE_DAYS, HistoryEnvelope, HistoryProblem, MAX_HISTORY_LIMIT, MAX_HISTORY_RANGE_DAYS } from "./model";
import { PriceHistoryRequests } from "./service";

const DESCRIPTION = [
  "The recorded states of the product's offers over a range, with the data endpoint's rules: the bearer key is checked first (401 before anything else), then the parameters, the rate limits (the same buckets as the price look-up), `Idempotency-Key` and the billing.",
  `\`interval=change\` (default): every state of each offer that held during [from, to) (price, shipping, availability) with \`validFrom\` and \`validTo\` (null while it holds). \`interval=day\`: per UTC day and merchant, the lowest, highest and last price and the availability at the end of the day (now, for today), over the whole UTC days the range touches.`,
  `Range: \`from\` (inclusive) and \`to\` (exclusive), ISO 8601 dates or date-times with an offset; default the last ${DEFAULT_HISTORY_RANGE_DAYS} days (to = now); at most ${MAX_HISTORY_RANGE_DAYS} days apart and from before to, else 400 invalid-parameter. \`merchant\` keeps one merchant's offer. \`limit\` (1..${MAX_HISTORY_LIMIT}, default ${DEFAULT_HISTORY_LIMIT}) points per page; pass \`data.nextCursor\` as \`cursor\` with the same query for the next page.`,
  "Billing (`meta.reason`): `history` when the answer has at least one point, billed `HISTORY_CREDIT_COST` credits (each page is an answer); `no-data` when the product exists but nothing falls in the range (not billed); 400 `invalid-gtin` or `invalid-parameter`, 401 `unauthorized`, 402 `insufficient-credits` (the balance, or the key's `monthlyCreditLimit`), 404 `product-not-found`, 429 `rate-limited`, 503 `unavailable` (the debit could not be recorded: nothing billed, retry), none billed. Error bodies carry `meta`.",
  "With an `Idempotency-Key` header, a retry within 24 h with the same GTIN and query gets the stored answer (`Idempotent-Replayed: true`) and is not billed again; the same key for another query is 422 `unprocessable-body`; a retry while the first is in flight is 409.",
].join("\n\n");

export function historyRoutes(services: Services) {
  const history = new PriceHistoryRequests(services);
  const text = (description: string, examples?: string[]) => t.Optional(t.String(examples === undefined ? { description } : { description, examples }));

  return new Elysia({ name: "history", prefix: "/api/v1/products" }).get(
    "/:gtin/price/history",
    // A UTF-8 body with its content type: Elysia sends it as is (the 200 schema is documentation only).
    ({ params, query, request, set }) => history.handle({ request, set }, params.gtin, query) as Promise<unknown> as Promise<typeof HistoryEnvelope.static>,
    {
      params: t.Object({ gtin: t.String({ description: "GTIN-8, GTIN-12, GTIN-13 or GTIN-14", examples: ["4006381333931"] }) }),
      // Documented here, checked by the handler after authentication (noValidate), so its problems carry meta.
      query: t.Object(
        {
          from: text(`Start of the range (inclusive): ISO 8601 date or date-time with offset (default: ${DEFAULT_HISTORY_RANGE_DAYS} days before \`to\`)`, [
            "2026-10-01",
          ]),
          to: text("End of the range (exclusive): ISO 8601 date or date-time with offset (default: now)", ["2026-11-01"]),
          merchant: text("Only this merchant's offer (a merchant id)", ["m-1"]),
          interval: t.Optional(t.UnionEnum(["change", "day"], { description: "`change` (default): every state; `day`: per UTC day and merchant" })),
          limit: t.Optional(
            t.String({ pattern: "^[0-9]+$", description: `Points per page (1..${MAX_HISTORY_LIMIT}, default ${DEFAULT_HISTORY_LIMIT})`, examples: ["1000"] }),
          ),
          cursor: text("`data.nextCursor` of the previous page"),
          language: text("Response language: `en` or `fr` (default: Accept-Language, then `en`)", ["en"]),
        },
        { noValidate: true },
      ),
      headers: LookupHeaders,
      response: {
        200: HistoryEnvelope,
        ...CommonErrors,
        ...lookupErrors(HistoryProblem),
      },
      detail: {
        summary: "Price history of a product",
        description: DESCRIPTION,
        tags: ["Products"],
        operationId: "getProductPriceHistory",
        security: [{ apiKey: [] }],
      },
    },
  );
}
