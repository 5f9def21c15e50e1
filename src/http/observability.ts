import { Elysia } from "elysia";
import type { Logger } from "../lib/logger";
import type { ServiceMetrics } from "../lib/service-metrics";
import { isWellFormedKey, keyPrefixOf } from "../modules/keys/key-format";
import { Problem } from "./problem";

type BillingMeta = { reason?: unknown; creditsConsumed?: unknown };
const notedMeta = new WeakMap<Request, BillingMeta>();

/** For a route that answers with a serialized body: the billing `meta` it wrote, for the metrics and the access log. */
export function noteBillingMeta(request: Request, meta: BillingMeta): void {
  notedMeta.set(request, meta);
}

/** The billing `meta` of a data response (noted by the route, the envelope on success, the problem's extension on error). */
function billingMeta(request: Request, responseValue: unknown, error: unknown): BillingMeta | undefined {
  const noted = notedMeta.get(request);
  if (noted !== undefined) return noted;
  const carrier = error instanceof Problem ? error.extensions : responseValue;
  if (typeof carrier !== "object" || carrier === null || !("meta" in carrier)) return undefined;
  const meta = (carrier as { meta: unknown }).meta;
  return typeof meta === "object" && meta !== null ? meta : undefined;
}

/** The 8-character prefix of a well-formed bearer key, never more: an arbitrary token is not logged at all. */
function bearerKeyPrefix(request: Request, keyPrefix: string): string | undefined {
  const header = request.headers.get("authorization");
  if (header === null || !/^Bearer /i.test(header)) return undefined;
  const secret = header.slice(7).trim();
  return isWellFormedKey(secret, keyPrefix) ? keyPrefixOf(secret) : undefined;
}

/**
 * One access-log line and the request metrics per request, recorded after the response is handed
 * to the server. Registered before `httpBase`, so its start time is taken before anything else runs;
 * `httpBase` sets `set.status` to the status of the problem it answers with.
 */
export function requestObservability(options: { logger: Logger; metrics: ServiceMetrics; keyPrefix: string }) {
  const { logger, metrics } = options;
  const startedAt = new WeakMap<Request, number>();
  return new Elysia({ name: "http.observability" })
    .onRequest(({ request }) => {
      startedAt.set(request, performance.now());
    })
    .onAfterResponse({ as: "global" }, (context) => {
      const { request, set, responseValue } = context;
      const seconds = (performance.now() - (startedAt.get(request) ?? performance.now())) / 1000;
      const error = (context as { error?: unknown }).error;
      const status = responseValue instanceof Response ? responseValue.status : typeof set.status === "number" ? set.status : 200;
      const route = context.route || "unmatched";
      const meta = billingMeta(request, responseValue, error);
      const reason = typeof meta?.reason === "string" ? meta.reason : "";
      const credits = typeof meta?.creditsConsumed === "number" ? meta.creditsConsumed : 0;

      metrics.requests.inc([request.method, route, String(status), reason]);
      metrics.requestDuration.observe([request.method, route], seconds);
      if (credits > 0) metrics.creditsDebited.inc([], credits);

      const url = request.url;
      const pathStart = url.indexOf("/", url.indexOf("//") + 2);
      const queryStart = url.indexOf("?", pathStart);
      logger.info("request", {
        requestId: set.headers["x-request-id"],
        method: request.method,
        route,
        path: url.slice(pathStart, queryStart === -1 ? undefined : queryStart),
        status,
        durationMs: Math.round(seconds * 100_000) / 100,
        keyPrefix: bearerKeyPrefix(request, options.keyPrefix),
        reason: reason || undefined,
      });
    });
}
