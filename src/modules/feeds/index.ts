import { Elysia } from "elysia";
import type { FeedTokenCredential, FeedTokenScope } from "../../db/feeds/records";
import { CommonErrors, Problems } from "../../http/model";
import { afterAuthentication } from "../../http/authentication-first";
import { Problem } from "../../http/problem";
import type { Services } from "../../services";
import { BEARER_CHALLENGE } from "../keys/bearer";
import type { FeedFormat } from "../ingest/import-feed";
import { countRun, runJSON, sourceJSON, sourceStatuses } from "./freshness";
import { FeedRunPageSchema, FeedRunQuery, FeedRunSchema, FeedSourceListSchema, FeedSourceParams } from "./model";
import { describeError, FeedTooLargeError, finishRun, importForSource, limitedBody, runRecord } from "./run";
import { verifyFeedToken } from "./tokens";

/** The push endpoint reads its body as a stream under FEED_BODY_LIMIT, so httpBase leaves its body alone. */
export const FEED_PUSH_PATH = "/api/v1/feeds/push";

const FEED_MEDIA_TYPES: Record<string, FeedFormat> = {
  "application/x-ndjson": "ndjson",
  "application/jsonl": "ndjson",
  "application/ndjson": "ndjson",
  "text/csv": "csv",
};

const REFUSALS = {
  missing: { en: "A feed token is required: Authorization: Bearer ftk_….", fr: "Un jeton de flux est requis : Authorization: Bearer ftk_…." },
  invalid: {
    en: "The feed token is invalid (API keys are not accepted here).",
    fr: "Le jeton de flux est invalide (les clés d'API ne sont pas acceptées ici).",
  },
  revoked: { en: "The feed token is revoked.", fr: "Le jeton de flux est révoqué." },
} as const;

const SCOPE_REFUSALS: Record<FeedTokenScope, { en: string; fr: string }> = {
  push: { en: "This endpoint needs a push token (feeds token create --source).", fr: "Ce point d'accès exige un jeton d'envoi (feeds token create --source)." },
  read: { en: "This endpoint needs a read token (feeds token create --read).", fr: "Ce point d'accès exige un jeton de lecture (feeds token create --read)." },
};

const feedTokenSecurity = [{ feedToken: [] }];
const authErrors = { 401: Problems(["unauthorized"]), 403: Problems(["forbidden"]) };

/**
 * Feeds over HTTP: systems that produce prices push NDJSON or CSV to their source with a feed token;
 * the operator's read token lists sources (with their freshness) and their run reports. Customer API
 * keys and sessions are never accepted here, and feed tokens are accepted nowhere else.
 */
export function feedRoutes(services: Services) {
  const { store, clock, config, logger, metrics } = services;

  async function authenticate(request: Request, scope: FeedTokenScope): Promise<FeedTokenCredential> {
    const result = await verifyFeedToken(store, request.headers.get("authorization"));
    if (typeof result === "string") throw new Problem("unauthorized", { detail: REFUSALS[result], headers: { "www-authenticate": BEARER_CHALLENGE } });
    if (result.scope !== scope) throw new Problem("forbidden", { detail: SCOPE_REFUSALS[scope] });
    return result;
  }

  /** `feedToken: "read"` on a route authenticates the read token first, before any validation. */
  const readToken = new Elysia({ name: "feeds.read-token" }).macro({
    feedToken: (scope: FeedTokenScope) => ({
      async transform({ request }) {
        await authenticate(request, scope);
        afterAuthentication(request);
      },
    }),
  });

  return new Elysia({ name: "feeds.routes" })
    .use(readToken)
    .post(
      FEED_PUSH_PATH,
      async ({ request }) => {
        const credential = await authenticate(request, "push");
        const source = credential.sourceId === null ? null : await store.getFeedSource(credential.sourceId);
        if (source === null || source.removedAt !== null)
          throw new Problem("unauthorized", { detail: REFUSALS.revoked, headers: { "www-authenticate": BEARER_CHALLENGE } });
        const mediaType = (request.headers.get("content-type") ?? "").split(";")[0]!.trim().toLowerCase();
        const format = FEED_MEDIA_TYPES[mediaType];
        if (format === undefined) {
          throw new Problem("unsupported-media-type", {
            detail: {
              en: "A feed is application/x-ndjson (or application/jsonl) or text/csv.",
              fr: "Un flux est en application/x-ndjson (ou application/jsonl) ou text/csv.",
            },
          });
        }
        const encoding = (request.headers.get("content-encoding") ?? "identity").trim().toLowerCase();
        if (encoding !== "identity" && encoding !== "gzip") {
          throw new Problem("unsupported-media-type", {
            detail: { en: "Content-Encoding may be gzip or none.", fr: "Content-Encoding peut être gzip ou absent." },
          });
        }
        const limit = config.feedBodyLimitBytes;
        const tooLarge = () =>
          new Problem("payload-too-large", {
            detail: {
              en: `A feed body may be at most ${limit} bytes (FEED_BODY_LIMIT).`,
              fr: `Un corps de flux fait au plus ${limit} octets (FEED_BODY_LIMIT).`,
            },
            headers: { connection: "close" },
          });
        // A declared length over the limit is refused before anything is read or written.
        if (encoding === "identity" && Number(request.headers.get("content-length") ?? 0) > limit) throw tooLarge();

        const context = { source, trigger: "push" as const, startedAt: clock.now() };
        const stream = limitedBody(request.body ?? new Blob([]).stream(), { limitBytes: limit });
        const { report, error } = await importForSource(store, clock, context, { stream, format });
        const run = await finishRun(store, {
          run: runRecord(clock, context, error === null ? { status: "ok", report } : { status: "failed", report, error: describeError(error) }),
          leaseOwner: null,
        });
        countRun(metrics, source.name, run);
        logger.info("feed pushed", {
          sourceId: source.id,
          source: source.name,
          runId: run.id,
          status: run.status,
          recordsRead: run.recordsRead,
          offers: run.offers,
          rejected: run.rejectedCount,
        });
        // What was written before the body went wrong stays written; the problem carries the report.
        if (error instanceof FeedTooLargeError)
          throw new Problem("payload-too-large", { detail: tooLarge().detail, extensions: { run: runJSON(run) }, headers: { connection: "close" } });
        if (error !== null) {
          throw new Problem("invalid-body", {
            detail: { en: `The body could not be read: ${run.error}.`, fr: `Le corps n'a pas pu être lu : ${run.error}.` },
            extensions: { run: runJSON(run) },
          });
        }
        return runJSON(run);
      },
      {
        parse: "none",
        response: { 200: FeedRunSchema, ...CommonErrors, ...authErrors },
        detail: {
          summary: "Push a feed",
          description:
            "Streams an offer feed into the token's source with the rules of `price-service import`: each line is checked on its own, bad lines are reported with their line number (from 1) and skipped, good ones are written in batches. The source writes only what it owns: a line for a merchant it is not bound to (`merchants` of the source) is rejected with that reason; a product's title, brand and image stay those of the first writer that gave them unless the source is `authoritative`; an `observedAt` more than 60 s ahead is rejected (up to 60 s ahead it counts as now). Body: `application/x-ndjson` (or `application/jsonl`) or `text/csv` with a header row, optionally `Content-Encoding: gzip`, at most FEED_BODY_LIMIT bytes after decompression. Answers the run's report (200 even when lines were rejected: see `rejectedCount`). A body cut short or over the limit is 400 or 413 with the report in `run`; what was written before stays. Authenticated by a push feed token (`price-service feeds token create --source`), never by an API key.",
          tags: ["Feeds"],
          operationId: "pushFeed",
          security: feedTokenSecurity,
          requestBody: {
            required: true,
            content: {
              "application/x-ndjson": {
                schema: { type: "string", description: "One feed record (JSON object) per line" },
                example:
                  '{"gtin":"4006381333931","merchantId":"shop-1","price":"1.99","currency":"EUR","availability":"in_stock","observedAt":"2026-01-01T12:00:00Z"}\n',
              },
              "text/csv": {
                schema: { type: "string", description: "A header row naming the feed fields, then one record per row" },
                example: "gtin,merchantId,price,currency,observedAt\n4006381333931,shop-1,1.99,EUR,2026-01-01T12:00:00Z\n",
              },
            },
          },
        },
      },
    )
    .get(
      "/api/v1/feeds/sources",
      async () => {
        const statuses = await sourceStatuses(store, clock.now(), config.freshnessWindowMs);
        return { items: statuses.map(sourceJSON) };
      },
      {
        feedToken: "read",
        response: { 200: FeedSourceListSchema, ...CommonErrors, ...authErrors },
        detail: {
          summary: "List feed sources",
          description:
            "Every source the operator declared, oldest first, with its merchants and precedence, its last run, last successful run, whether it went quiet (no success within FRESHNESS_WINDOW) and the share of its offers still fresh. A URL source's `location` is its scheme and host only: its user, password, path and query may carry a token and are shown by the operator's CLI alone. Authenticated by a read feed token (`price-service feeds token create --read`).",
          tags: ["Feeds"],
          operationId: "listFeedSources",
          security: feedTokenSecurity,
        },
      },
    )
    .get(
      "/api/v1/feeds/sources/:id/runs",
      async ({ params, query }) => {
        const source = await store.getFeedSource(params.id);
        if (source === null)
          throw new Problem("not-found", { detail: { en: "No feed source has this id or name.", fr: "Aucune source de flux n'a cet identifiant ou ce nom." } });
        const page = await store.listFeedRuns(source.id, { limit: query.limit ?? 20, after: query.cursor });
        return { items: page.items.map(runJSON), nextCursor: page.nextCursor };
      },
      {
        feedToken: "read",
        params: FeedSourceParams,
        query: FeedRunQuery,
        response: { 200: FeedRunPageSchema, ...CommonErrors, ...authErrors, 404: Problems(["not-found"]) },
        detail: {
          summary: "List a source's runs",
          description:
            "The run reports of one source (by id or name), newest first: when, records read, products, offers, rejected lines with their line numbers, duration, error. Authenticated by a read feed token.",
          tags: ["Feeds"],
          operationId: "listFeedRuns",
          security: feedTokenSecurity,
        },
      },
    );
}
