import { Elysia, type ValidationError } from "elysia";
import { errorCode, isConnectionLost, isUnstorableText } from "../db/database-errors";
import { newId } from "../lib/ids";
import type { Logger } from "../lib/logger";
import { deferUntilAuthenticated, isSecured, securedRoutes } from "./authentication-first";
import { allowedMethods, type Route, wrongMethod } from "./head";
import { notJSON, Problem, problemBody } from "./problem";
import { repeatedQueryParameter, requestLanguage } from "./request";
import { fromValidation, repeatedParameter } from "./validation";
import { isLanguage } from "./i18n";

export const SECURITY_HEADERS: Record<string, string> = {
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
  "content-security-policy": "default-src 'none'; frame-ancestors 'none'",
  "permissions-policy": "camera=(), geolocation=(), microphone=(), payment=(), usb=()",
  // Balances, keys and clear secrets must never sit in a shared cache; a route that may be cached sets its own.
  "cache-control": "no-store",
};

/** The security headers for this deployment: HSTS only when the public URL is https (behind a TLS proxy). */
export function securityHeaders(publicUrl: string): Record<string, string> {
  return publicUrl.startsWith("https:") ? { ...SECURITY_HEADERS, "strict-transport-security": "max-age=31536000" } : SECURITY_HEADERS;
}

const NUL_IN_TEXT = {
  en: "Text in the request may not contain the NUL character (U+0000).",
  fr: "Le texte de la requête ne peut pas contenir le caractère NUL (U+0000).",
};
const JSON_BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);
const DATABASE_AWAY = {
  en: "The database could not be reached to finish this request; retry in a moment.",
  fr: "La base de données était injoignable pour traiter cette requête ; réessayez dans un instant.",
};

/** Closing the connection spares the server from draining an upload it has refused. */
function payloadTooLarge(): Problem {
  return new Problem("payload-too-large", { headers: { connection: "close" } });
}

/** A body sent without Content-Length (chunked) is measured on a copy, up to the limit, before the parser reads it. */
async function assertChunkedBodyWithin(request: Request, limit: number): Promise<void> {
  const reader = request.clone().body!.getReader();
  let size = 0;
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    size += read.value.byteLength;
    if (size > limit) {
      reader.cancel().catch(() => {});
      throw payloadTooLarge();
    }
  }
}

/**
 * RFC 9110 §11.6.1: a 401 names the scheme to use. An API key's refusal says `Bearer` itself; any
 * other 401 is about the session cookie, which has no registered scheme: `Cookie`, with the
 * cookie's name, as draft-broyer-http-cookie-auth proposed.
 */
/** The paths whose every answer is in the request's language (problems are, wherever they come from). */
export const LOCALIZED_PATH_PREFIXES = ["/api/", "/billing/"] as const;

function isLocalized(url: string): boolean {
  return LOCALIZED_PATH_PREFIXES.some((prefix) => url.includes(prefix));
}

export const SESSION_CHALLENGE = 'Cookie realm="price-service", cookie-name="session"';

/**
 * A problem's answer: its status and headers go into `set` and its JSON body is returned, so Elysia
 * builds one Response with every header of the request (a returned Response would be copied again
 * to merge them).
 */
export function problemAnswer(
  problem: Problem,
  request: Request,
  set: { status?: number | string; headers: Record<string, unknown> },
  requestId: string,
  typeBase: string,
): string {
  // A problem that names its language (the batch look-up's body `language`) is written in it.
  const named = problem.headers["content-language"];
  const language = isLanguage(named) ? named : requestLanguage(request);
  set.status = problem.status;
  set.headers["content-type"] = "application/problem+json";
  set.headers["content-language"] = language;
  if (problem.status === 401 && !Object.keys(problem.headers).some((name) => name.toLowerCase() === "www-authenticate"))
    set.headers["www-authenticate"] = SESSION_CHALLENGE;
  Object.assign(set.headers, problem.headers);
  return JSON.stringify(problemBody(problem, { typeBase, language, requestId }));
}

/**
 * Cross-cutting HTTP behaviour: a request id on every response, security headers, the body limit,
 * and the one error handler that turns every failure (thrown Problem, validation, unknown route,
 * unexpected exception) into an RFC 9457 problem. Internal messages never reach the body.
 */
export function httpBase(options: {
  typeBase: string;
  bodyLimitBytes: number;
  logger: Logger;
  publicUrl: string;
  routes: () => Route[];
  streamedBodyPaths?: string[];
}) {
  // Paths whose handler streams the body itself, under its own limit and media types (the feed push).
  const streamedBodyPaths = new Set(options.streamedBodyPaths ?? []);
  const headers = securityHeaders(options.publicUrl);
  const methodsAt = allowedMethods(options.routes);
  const needsCredential = securedRoutes(options.routes);
  /** A problem of the request itself: at once on a public route, after authentication on a secured one. */
  const refuse = (request: Request, problem: Problem, secured: boolean): void => {
    if (!secured) throw problem;
    deferUntilAuthenticated(request, problem);
  };
  return (
    new Elysia({ name: "http.base" })
      .error({ Problem })
      // Refusals throw (rather than return a response) so they pass through onError and the access log like any error.
      .onRequest(async ({ request, set }) => {
        set.headers["x-request-id"] = newId("req");
        Object.assign(set.headers, headers);
        // Every API answer and billing page is localized (problem texts, formatted money, labels): say in which language.
        if (isLocalized(request.url)) set.headers["content-language"] = requestLanguage(request);
        if (streamedBodyPaths.size > 0 && streamedBodyPaths.has(new URL(request.url).pathname)) return;
        const length = Number(request.headers.get("content-length") ?? 0);
        if (length > options.bodyLimitBytes) throw payloadTooLarge();
        if (
          JSON_BODY_METHODS.has(request.method) &&
          (length > 0 || request.headers.has("transfer-encoding") || request.body !== null) &&
          new URL(request.url).pathname.startsWith("/api/")
        ) {
          const type = request.headers.get("content-type") ?? "";
          if (!/^application\/([\w.+-]+\+)?json\b/i.test(type) && !request.url.includes("/api/v1/webhooks/")) {
            refuse(request, new Problem("unsupported-media-type"), needsCredential(request.method, new URL(request.url).pathname));
          }
        }
        // A parse hook would do this later, but Elysia then breaks routes declared with `parse: "none"`.
        if (request.body !== null && !request.headers.has("content-length")) await assertChunkedBodyWithin(request, options.bodyLimitBytes);
      })
      // Before validation, which would keep one of the values. Only routes that take query parameters;
      // one that validates its own query (`noValidate`) checks this itself.
      .onTransform({ as: "global" }, ({ request, route }) => {
        const repeated = repeatedQueryParameter(request.url);
        if (repeated === null) return;
        const declared = options.routes().find((candidate) => candidate.path === route && candidate.method === request.method);
        const query = declared?.hooks?.query;
        if (query !== undefined && query.noValidate !== true)
          refuse(request, new Problem("invalid-parameter", { detail: repeatedParameter(repeated) }), isSecured(declared));
      })
      .onError({ as: "global" }, ({ code, error, request, set }) => {
        const requestId = String(set.headers["x-request-id"] ?? newId("req"));
        let problem: Problem;
        if (error instanceof Problem) problem = error;
        // Elysia wraps what a parse hook throws (the chunked body limit) in a ParseError.
        else if (code === "PARSE" && (error as Error).cause instanceof Problem) problem = (error as Error).cause as Problem;
        else if (code === "VALIDATION" && (error as ValidationError).type !== "response") problem = fromValidation(error as ValidationError);
        // Elysia says NOT_FOUND also when the path exists under other methods: that is a 405 with Allow.
        else if (code === "NOT_FOUND") problem = wrongMethod(methodsAt(new URL(request.url).pathname));
        // Past Bun's own backstop (maxRequestBodySize), Bun has already answered a bare 413; this is for the logs.
        else if (code === "PARSE" && String(error).includes("maxRequestBodySize")) problem = payloadTooLarge();
        else if (code === "PARSE") problem = notJSON();
        else if (code === "INVALID_COOKIE_SIGNATURE") problem = new Problem("unauthorized");
        else if (isUnstorableText(error)) problem = new Problem("invalid-parameter", { detail: NUL_IN_TEXT });
        // The database is away for a moment (a restart, a fail-over): the client can retry; no bug to log as one.
        else if (isConnectionLost(error)) {
          options.logger.warn("database unreachable", { requestId, code: errorCode(error) });
          problem = new Problem("unavailable", { detail: DATABASE_AWAY, headers: { "retry-after": "1" } });
        } else {
          options.logger.error("unhandled error", {
            requestId,
            code: String(code),
            error: error instanceof Error ? (error.stack ?? error.message) : String(error),
          });
          problem = new Problem("internal");
        }
        return problemAnswer(problem, request, set, requestId, options.typeBase);
      })
  );
}
