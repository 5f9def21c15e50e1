import { LOCALIZED_PATH_PREFIXES } from "./base";
import type { Route } from "./head";
import { PROBLEMS, type ProblemSlug } from "./problem";

type JSONObject = Record<string, any>;

const REASON_PHRASES: Record<number, string> = { 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content", 302: "Found", 303: "See Other" };
const GENERATED_DESCRIPTION = /^Response for status \d+$|^RFC 9457 problem details$/;
const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);
// OpenAPI ignores header parameters with these names: the security schemes and media types say it.
const RESERVED_HEADER_PARAMETERS = new Set(["authorization", "accept", "content-type"]);
// The one body media type the service parses (src/http/base.ts answers others with 415).
const REQUEST_MEDIA_TYPE = "application/json";

/** The response headers the service sends, each described once and copied where it is sent (a `$ref` could not say `required`). */
const RESPONSE_HEADERS: Record<string, JSONObject> = {
  "X-Request-Id": {
    description: "This request's id, also in problem bodies and the logs",
    schema: { type: "string", examples: ["req_0mwrd57q90000brqra5jtuxfecebe"] },
  },
  RateLimit: {
    description:
      "For the policy closest to its limit (the one that refused a 429, else the one with the fewest requests left): its name, the requests left (`r`, never above its `q`) and seconds until they are all back (`t`; on a 429, the same as Retry-After), per draft-ietf-httpapi-ratelimit-headers",
    schema: { type: "string", examples: ['"default";r=99;t=1', '"organization";r=0;t=1'] },
  },
  "RateLimit-Policy": {
    description:
      'The quotas, `q` requests per `w` seconds: first the API key\'s (`"default"`, the service\'s RATE_LIMIT, or `"key"`, its own `rateLimit`), then `"organization"`, shared by all of the organization\'s keys (ORG_RATE_LIMIT). On the batch look-up the same quotas count items (one per GTIN asked: a single look-up is one item), said by `qu="items"`',
    schema: { type: "string", examples: ['"default";q=100;w=1, "organization";q=500;w=1', '"key";q=10;w=1;qu="items", "organization";q=500;w=1;qu="items"'] },
  },
  "Retry-After": { description: "Seconds to wait before a retry can succeed", schema: { type: "integer", minimum: 1, examples: [1] } },
  "WWW-Authenticate": {
    description:
      'The credentials this endpoint takes: `Bearer realm="price-service"` for an API key, `Cookie realm="price-service", cookie-name="session"` for the session cookie, both where either is taken',
    schema: { type: "string", examples: ['Bearer realm="price-service"'] },
  },
  "Content-Disposition": { description: "`attachment` with a file name, for a download (CSV)", schema: { type: "string" } },
  Vary: { description: "`Accept`: the media type depends on the request's Accept header", schema: { type: "string" } },
  "Idempotent-Replayed": {
    description: "`true` when this is the stored answer to an earlier request with the same Idempotency-Key",
    schema: { type: "string", enum: ["true"] },
  },
  "Set-Cookie": { description: "The `session` cookie (HttpOnly, SameSite=Lax), or its removal", schema: { type: "string" } },
  Location: { description: "Where the redirect leads", schema: { type: "string", format: "uri-reference" } },
  "Content-Language": {
    description:
      "The language of the answer's texts (problem details, descriptions, formatted money): the `language` query parameter, else the best of Accept-Language, else `en`",
    schema: { type: "string", enum: ["en", "fr"] },
  },
};

const headerRef = (name: string, required: boolean) => ({ ...RESPONSE_HEADERS[name], required });

function slugsOfStatus(status: number): ProblemSlug[] {
  return (Object.keys(PROBLEMS) as ProblemSlug[]).filter((slug) => PROBLEMS[slug].status === status);
}

/**
 * Elysia's `t.Integer` and `t.Numeric`, and QueryInteger (src/http/model.ts), validate a query
 * string through `anyOf: [{type: string, …}, {type: integer}]`. On the wire the
 * value is the integer (JSON) or its decimal digits (query), which is what `type: integer` says.
 */
function isCoercionUnion(schema: JSONObject): JSONObject | undefined {
  if (!Array.isArray(schema.anyOf) || schema.anyOf.length !== 2) return undefined;
  const text = schema.anyOf.find(
    (member: JSONObject) => member.type === "string" && (member.format === "integer" || member.format === "numeric" || member["x-decimal-text"] === true),
  );
  const number = schema.anyOf.find((member: JSONObject) => member.type === "integer" || member.type === "number");
  return text !== undefined && number !== undefined ? number : undefined;
}

/**
 * The generator writes a nullable constant (`t.Union([t.Literal(x), t.Null()])`) as
 * `{ const: x, type: [string, null] }`, which null does not satisfy: it is `enum: [x, null]`.
 */
function nullableConstant(schema: JSONObject): JSONObject | undefined {
  if (!("const" in schema) || !Array.isArray(schema.type) || !schema.type.includes("null")) return undefined;
  const { const: constant, ...rest } = schema;
  return { ...rest, enum: [constant, null] };
}

function plainSchemas(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(plainSchemas);
  if (value === null || typeof value !== "object") return value;
  const number = isCoercionUnion(value as JSONObject);
  if (number !== undefined) return plainSchemas(number);
  const nullable = nullableConstant(value as JSONObject);
  if (nullable !== undefined) return plainSchemas(nullable);
  // `noValidate` tells Elysia a schema is documentation only; it is no JSON Schema keyword.
  return Object.fromEntries(
    Object.entries(value)
      .filter(([key]) => key !== "noValidate")
      .map(([key, item]) => [key, plainSchemas(item)]),
  );
}

/** The response headers of one response, from what the operation is (see RESPONSE_HEADERS). */
function responseHeaders(path: string, operation: JSONObject, status: number): JSONObject {
  const headers: JSONObject = { "X-Request-Id": headerRef("X-Request-Id", true) };
  if (status >= 400 || LOCALIZED_PATH_PREFIXES.some((prefix) => path.startsWith(prefix))) headers["Content-Language"] = headerRef("Content-Language", true);
  if (operation.operationId === "getProductPrice" || operation.operationId === "getProductPrices") {
    headers["RateLimit-Policy"] = headerRef("RateLimit-Policy", status !== 413 && status !== 415 && status !== 500);
    if (status !== 400 && status !== 401 && status !== 413 && status !== 500) headers.RateLimit = headerRef("RateLimit", false);
  }
  if (status === 429) headers["Retry-After"] = headerRef("Retry-After", true);
  if (status === 401) headers["WWW-Authenticate"] = headerRef("WWW-Authenticate", true);
  if (status >= 300 && status < 400) headers.Location = headerRef("Location", true);
  if (status < 300 && (operation.parameters ?? []).some((parameter: JSONObject) => parameter.in === "header" && parameter.name === "idempotency-key")) {
    headers["Idempotent-Replayed"] = headerRef("Idempotent-Replayed", false);
  }
  if (status < 400 && (operation["x-response-headers"] ?? []).includes("Set-Cookie")) headers["Set-Cookie"] = headerRef("Set-Cookie", status < 300);
  if (status < 300 && operation["x-alternative-content"]?.[String(status)] !== undefined) {
    headers.Vary = headerRef("Vary", true);
    headers["Content-Disposition"] = headerRef("Content-Disposition", false);
  }
  return headers;
}

/**
 * What the generator cannot know, added to the document it builds from the route schemas: the
 * server (PUBLIC_URL) and tags; integers as plain `type: integer`; request bodies only as JSON;
 * no `Authorization` header parameter (the security schemes say it); error responses as
 * `application/problem+json` with their slugs and one example per slug (typed with this
 * deployment's ERROR_TYPE_BASE, with the response's own status); a schema's `contentMediaType`
 * names its media type (HTML, Prometheus text); redirects and 204 have no body; every response
 * lists the headers it carries; generic descriptions become the slugs or the reason phrase.
 */
/**
 * The generator documents a body's media types from the route's parsers, and writes none for a route
 * that authenticates in its parse phase (a function it cannot read): such a body is JSON.
 */
function restoreJSONBody(operation: JSONObject, method: string, path: string, routes: Route[]): void {
  const content: JSONObject | undefined = operation.requestBody?.content;
  if (content === undefined || Object.keys(content).length > 0) return;
  const routePath = path.replace(/\{([^}]+)\}/g, ":$1");
  const body = routes.find((route) => route.method === method.toUpperCase() && route.path === routePath)?.hooks?.body;
  if (body !== undefined) content[REQUEST_MEDIA_TYPE] = { schema: plainSchemas(structuredClone(body)) };
}

export function finishOpenAPIDocument<T extends JSONObject>(generated: T, options: { typeBase: string; publicUrl: string; routes: () => Route[] }): T {
  const document = plainSchemas(structuredClone(generated)) as JSONObject;
  document.servers = [{ url: options.publicUrl, description: "This deployment (PUBLIC_URL)" }];
  document.info = { ...document.info, contact: { name: "price-service", url: `${options.publicUrl}/docs` } };
  const tags = new Set<string>();
  for (const [path, item] of Object.entries<JSONObject>(document.paths ?? {})) {
    for (const [method, operation] of Object.entries<JSONObject>(item)) {
      if (!HTTP_METHODS.has(method)) continue;
      for (const tag of operation.tags ?? []) tags.add(tag);
      // No security requirement means a public operation; saying so keeps linters from guessing.
      operation.security ??= [];
      if (Array.isArray(operation.parameters)) {
        operation.parameters = operation.parameters.filter(
          (parameter: JSONObject) => !(parameter.in === "header" && RESERVED_HEADER_PARAMETERS.has(parameter.name.toLowerCase())),
        );
        if (operation.parameters.length === 0) delete operation.parameters;
      }
      restoreJSONBody(operation, method, path, options.routes());
      const requestContent: JSONObject | undefined = operation.requestBody?.content;
      if (requestContent !== undefined) {
        // Generated bodies list every media type Elysia parses; the service takes JSON only. A route
        // that declares its own non-JSON body (the feed push) keeps what it declared.
        if (REQUEST_MEDIA_TYPE in requestContent)
          for (const mediaType of Object.keys(requestContent)) if (mediaType !== REQUEST_MEDIA_TYPE) delete requestContent[mediaType];
      }
      for (const [statusText, response] of Object.entries<JSONObject>(operation.responses ?? {})) {
        const status = Number(statusText);
        // The generator writes a body-less response (204) as `content: { type: "null" }`, which is not OpenAPI; redirects have no body either.
        if ((response.content !== undefined && typeof response.content.type === "string") || (status >= 300 && status < 400)) delete response.content;
        const content: JSONObject = response.content ?? {};
        let slugs: ProblemSlug[] = [];
        for (const [mediaType, media] of Object.entries<JSONObject>(content)) {
          const schema: JSONObject = media.schema ?? {};
          const target = schema.contentMediaType ?? (status >= 400 && mediaType === "application/json" ? "application/problem+json" : mediaType);
          if (target !== mediaType) {
            delete content[mediaType];
            content[target] = media;
          }
          if (status < 400) continue;
          slugs = schema["x-problem-types"] ?? slugsOfStatus(status);
          const examples: JSONObject[] = Array.isArray(schema.examples) ? schema.examples : [];
          delete schema.examples;
          media.examples ??= Object.fromEntries(
            slugs.map((slug) => {
              const example = examples.find((candidate) => String(candidate.type).endsWith(`/${slug}`)) ?? {
                type: slug,
                title: PROBLEMS[slug].title,
                status,
                detail: PROBLEMS[slug].en,
                requestId: "req_0mwrd57q90000brqra5jtuxfecebe",
              };
              return [slug, { summary: `${PROBLEMS[slug].title} (${slug})`, value: { ...example, type: `${options.typeBase}/${slug}`, status } }];
            }),
          );
        }
        if (typeof response.description !== "string" || GENERATED_DESCRIPTION.test(response.description)) {
          response.description = status >= 400 ? `Problem details: ${slugs.join(", ")}` : (REASON_PHRASES[status] ?? `Status ${status}`);
        }
        // Other media types of a success response the route schema cannot say (CSV beside JSON), from `x-alternative-content`.
        Object.assign(content, operation["x-alternative-content"]?.[statusText] ?? {});
        if (Object.keys(content).length > 0) response.content = content;
        response.headers = responseHeaders(path, operation, status);
      }
      delete operation["x-response-headers"];
      delete operation["x-alternative-content"];
    }
  }
  const described: JSONObject[] = document.tags ?? [];
  document.tags = [
    ...described.filter((tag) => tags.has(tag.name)),
    ...[...tags].filter((name) => !described.some((tag) => tag.name === name)).map((name) => ({ name })),
  ];
  return document as T;
}
