import { Elysia, ValidationError } from "elysia";
import { newId } from "../lib/ids";
import type { Logger } from "../lib/logger";
import { Problem, problemBody } from "./problem";
import { requestLanguage } from "./request";

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

const JSON_BODY_METHODS = new Set(["POST", "PUT", "PATCH"]);

/** Closing the connection spares the server from draining an upload it has refused. */
function payloadTooLarge(): Problem {
  return new Problem("payload-too-large", undefined, {}, { connection: "close" });
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

export function problemResponse(problem: Problem, request: Request, requestId: string, typeBase: string): Response {
  const body = problemBody(problem, { typeBase, language: requestLanguage(request), requestId });
  return new Response(JSON.stringify(body), {
    status: problem.status,
    headers: { "content-type": "application/problem+json", ...problem.headers },
  });
}

function fromValidation(error: ValidationError): Problem {
  const first = error.valueError;
  const where = first?.path ? first.path.replace(/^\//, "").replaceAll("/", ".") : error.type;
  const reason = first?.message ?? "invalid value";
  if (error.type === "body") {
    return new Problem("invalid-body", { en: `Invalid value at ${where}: ${reason}.`, fr: `Valeur invalide pour ${where} : ${reason}.` }, {}, {}, 422);
  }
  return new Problem("invalid-parameter", { en: `Invalid ${error.type} parameter ${where}: ${reason}.`, fr: `Paramètre ${where} invalide : ${reason}.` });
}

/**
 * Cross-cutting HTTP behaviour: a request id on every response, security headers, the body limit,
 * and the one error handler that turns every failure (thrown Problem, validation, unknown route,
 * unexpected exception) into an RFC 9457 problem. Internal messages never reach the body.
 */
export function httpBase(options: { typeBase: string; bodyLimitBytes: number; logger: Logger; publicUrl: string }) {
  const headers = securityHeaders(options.publicUrl);
  return new Elysia({ name: "http.base" })
    .error({ Problem })
    // Refusals throw (rather than return a response) so they pass through onError and the access log like any error.
    .onRequest(async ({ request, set }) => {
      set.headers["x-request-id"] = newId("req");
      Object.assign(set.headers, headers);
      const length = Number(request.headers.get("content-length") ?? 0);
      if (length > options.bodyLimitBytes) throw payloadTooLarge();
      if (JSON_BODY_METHODS.has(request.method) && (length > 0 || request.headers.has("transfer-encoding") || request.body !== null) && new URL(request.url).pathname.startsWith("/api/")) {
        const type = request.headers.get("content-type") ?? "";
        if (!/^application\/([\w.+-]+\+)?json\b/i.test(type) && !request.url.includes("/api/v1/webhooks/")) {
          throw new Problem("unsupported-media-type");
        }
      }
      // A parse hook would do this later, but Elysia then breaks routes declared with `parse: "none"`.
      if (request.body !== null && !request.headers.has("content-length")) await assertChunkedBodyWithin(request, options.bodyLimitBytes);
    })
    .onError({ as: "global" }, ({ code, error, request, set }) => {
      const requestId = String(set.headers["x-request-id"] ?? newId("req"));
      let problem: Problem;
      if (error instanceof Problem) problem = error;
      // Elysia wraps what a parse hook throws (the chunked body limit) in a ParseError.
      else if (code === "PARSE" && (error as Error).cause instanceof Problem) problem = (error as Error).cause as Problem;
      else if (code === "VALIDATION" && (error as ValidationError).type !== "response") problem = fromValidation(error as ValidationError);
      else if (code === "NOT_FOUND") problem = new Problem("not-found", { en: "No route matches this method and path.", fr: "Aucune route ne correspond à cette méthode et ce chemin." });
      // Past Bun's own backstop (maxRequestBodySize), Bun has already answered a bare 413; this is for the logs.
      else if (code === "PARSE" && String(error).includes("maxRequestBodySize")) problem = payloadTooLarge();
      else if (code === "PARSE") problem = new Problem("invalid-body", { en: "The request body is not valid JSON.", fr: "Le corps de la requête n'est pas un JSON valide." });
      else if (code === "INVALID_COOKIE_SIGNATURE") problem = new Problem("unauthorized");
      else {
        options.logger.error("unhandled error", { requestId, code: String(code), error: error instanceof Error ? error.stack ?? error.message : String(error) });
        problem = new Problem("internal");
      }
      set.status = problem.status;
      return problemResponse(problem, request, requestId, options.typeBase);
    });
}
