import { t } from "elysia";
import { Int, PageQuery, pageOf, Timestamp } from "../../http/model";

const NullableTimestamp = t.Union([Timestamp, t.Null()]);

export const FeedRunSchema = t.Object(
  {
    id: t.String({ examples: ["run_0mwrd57q90000brqra5jtuxfe"] }),
    sourceId: t.String({ examples: ["src_0mwrd57q90000brqra5jtuxfe"] }),
    trigger: t.Union([t.Literal("schedule"), t.Literal("push"), t.Literal("manual")], { description: "What started the run" }),
    status: t.Union([t.Literal("ok"), t.Literal("not-modified"), t.Literal("failed")], { description: "not-modified: the URL answered 304, nothing was read" }),
    startedAt: Timestamp,
    finishedAt: Timestamp,
    durationMs: Int({ minimum: 0 }),
    file: t.Union([t.String(), t.Null()], { description: "The file of a directory source" }),
    httpStatus: t.Union([Int(), t.Null()], { description: "Status of the last answer of a URL source" }),
    attempts: Int({ minimum: 0, description: "Requests made (retries included)" }),
    recordsRead: Int({ minimum: 0 }),
    products: Int({ minimum: 0, description: "Distinct GTINs among the accepted records" }),
    offers: Int({ minimum: 0, description: "Accepted records with an offer" }),
    rejectedCount: Int({ minimum: 0 }),
    rejected: t.Array(t.Object({ line: Int({ minimum: 1 }), error: t.String() }), { description: "Rejected lines (from 1) and why; the first 1000" }),
    error: t.Union([t.String(), t.Null()], { description: "Why the run failed" }),
  },
  { description: "The report of one feed run" },
);

export const FeedSourceSchema = t.Object(
  {
    id: t.String({ examples: ["src_0mwrd57q90000brqra5jtuxfe"] }),
    name: t.String({ examples: ["shop-a"] }),
    kind: t.Union([t.Literal("url"), t.Literal("directory"), t.Literal("push")]),
    location: t.Union([t.String(), t.Null()], {
      description:
        "A URL source's scheme and host only (no user, password, path or query: they may carry a token); a directory source's directory; null for push sources",
    }),
    format: t.Union([t.Literal("ndjson"), t.Literal("csv"), t.Null()], { description: "null: from the content type or file name" }),
    intervalSeconds: t.Union([Int({ minimum: 1 }), t.Null()], { description: "Pull period; null for push sources" }),
    timeoutMs: Int({ minimum: 1 }),
    retries: Int({ minimum: 0 }),
    merchants: t.Array(t.String(), { description: "The merchant ids whose offers the source may write; a record for any other merchant is rejected" }),
    authoritative: t.Boolean({ description: "Whether its titles, brands and images replace those another source gave a product first" }),
    createdAt: Timestamp,
    nextRunAt: NullableTimestamp,
    lastRunAt: NullableTimestamp,
    lastSuccessAt: t.Union([Timestamp, t.Null()], { description: "End of the last run that ended ok or not-modified" }),
    silent: t.Boolean({ description: "No successful run within FRESHNESS_WINDOW" }),
    freshness: t.Object({
      offers: Int({ minimum: 0, description: "Offers this source wrote last" }),
      freshOffers: Int({ minimum: 0, description: "Of those, observed within FRESHNESS_WINDOW" }),
      freshRatio: t.Number({ minimum: 0, maximum: 1 }),
    }),
  },
  { description: "A feed source the operator declared" },
);

export const FeedSourceListSchema = t.Object({ items: t.Array(FeedSourceSchema) });
export const FeedRunPageSchema = pageOf(FeedRunSchema);
export const FeedSourceParams = t.Object({ id: t.String({ maxLength: 100, description: "Source id or name", examples: ["src_0mwrd57q90000brqra5jtuxfe"] }) });
export const FeedRunQuery = t.Object({
  limit: PageQuery.limit,
  cursor: t.Optional(t.String({ pattern: "^run_[0-9a-z]{1,60}$", description: "Opaque cursor from nextCursor" })),
});
