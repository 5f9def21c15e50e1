// Requests generated from the served OpenAPI document: for every operation, values outside each
// parameter's schema, malformed bodies and content types, odd headers, and the same requests without
// a credential. fast-check draws them from one seed, so a run replays from the seed it prints.
import fc from "fast-check";

type JSONSchema = Record<string, any>;
type Credential = "apiKey" | "session" | "feedToken";

/** One request, before it is addressed to a server: `{…}` placeholders in the path are per server. */
export interface HostileRequest {
  operationId: string;
  /** What the request breaks, for the failure message. */
  variant: string;
  method: string;
  path: string;
  /** Already percent-encoded query string, without `?` (may be empty). */
  query: string;
  headers: Record<string, string>;
  body?: string;
  /** The credential the request carries, or none (every secured operation must answer 401 first). */
  credential: Credential | "none";
  /** Whether the operation needs a credential. */
  secured: boolean;
}

interface Parameter {
  name: string;
  in: "path" | "query" | "header";
  required: boolean;
  schema: JSONSchema;
}

interface Operation {
  operationId: string;
  method: string;
  path: string;
  parameters: Parameter[];
  credentials: Credential[];
  jsonBody: JSONSchema | null;
  otherBodyTypes: string[];
}

/** Operations whose success ends the credential the rest of the run relies on: sent only without one. */
const CREDENTIAL_ENDING = new Set(["signOut", "refreshSession"]);

/** A resource of the caller's own, per server, for the path parameters of these operations. */
const OWN_RESOURCE: Array<[RegExp, string]> = [
  [/^\/api\/v1\/customer\/api-keys\/\{id\}/, "{ownKey}"],
  [/^\/api\/v1\/customer\/webhooks\/\{id\}/, "{ownWebhook}"],
  [/^\/api\/v1\/feeds\/sources\/\{id\}/, "{ownFeedSource}"],
];

const LONG = "a".repeat(3000);

/** Raw (already percent-encoded) values that no well-formed parameter has. */
const RAW_HOSTILE = [
  "",
  "%20",
  "abc",
  "-5",
  "0",
  "-0",
  "1.5",
  "1e3",
  "0x10",
  "true",
  "null",
  "%27",
  "%00",
  "%0A",
  "%1F",
  "%7F",
  "%zz",
  "%",
  "%C3%A9",
  "%F0%9F%98%80",
  "%FF",
  "99999999999999999999",
  "%5B%5D",
  "%7B%7D",
  LONG,
];

const odd = {
  "idempotency-key": ["", " ", "a", "x".repeat(300), "\tkey", "key with spaces", "cl\u00e9", "%00", "k".repeat(64)],
  "accept-language": ["*", "fr", "de", "fr-CA,fr;q=0.9", "en;q=abc", "", "q=1", "x".repeat(500), "fr;q=0,en;q=0", "zz-ZZ"],
  accept: ["text/csv", "application/xml", "*/*", "text/html", "application/problem+json", "", "garbage/", "application/json;q=0", "text/*;q=0.5"],
} as const;

/** The operations of the document, with what the generator needs of each. */
export function operationsOf(document: JSONSchema): Operation[] {
  const operations: Operation[] = [];
  for (const [path, item] of Object.entries<JSONSchema>(document.paths)) {
    for (const [method, operation] of Object.entries<JSONSchema>(item)) {
      if (typeof operation !== "object" || typeof operation.operationId !== "string") continue;
      const security: Array<Record<string, string[]>> = operation.security ?? document.security ?? [];
      const content: Record<string, JSONSchema> = operation.requestBody?.content ?? {};
      operations.push({
        operationId: operation.operationId,
        method: method.toUpperCase(),
        path,
        parameters: (operation.parameters ?? []).map((p: JSONSchema) => ({ name: p.name, in: p.in, required: p.required === true, schema: p.schema ?? {} })),
        credentials: security.flatMap((requirement) => Object.keys(requirement) as Credential[]),
        jsonBody: content["application/json"]?.schema ?? null,
        otherBodyTypes: Object.keys(content).filter((type) => type !== "application/json"),
      });
    }
  }
  return operations;
}

/** A value that fits the schema: its example, default or first enum member, else the simplest one. */
export function validValue(schema: JSONSchema): unknown {
  if (schema.examples?.length) return schema.examples[0];
  if (schema.example !== undefined) return schema.example;
  if (schema.default !== undefined) return schema.default;
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  const variants = schema.anyOf ?? schema.oneOf;
  if (variants?.length) return validValue(variants.find((v: JSONSchema) => v.type !== "null") ?? variants[0]);
  switch (schema.type) {
    case "integer":
    case "number":
      return schema.minimum ?? 1;
    case "boolean":
      return true;
    case "array":
      return schema.minItems ? Array.from({ length: schema.minItems }, () => validValue(schema.items ?? {})) : [];
    case "object":
      return Object.fromEntries((schema.required ?? []).map((name: string) => [name, validValue(schema.properties?.[name] ?? {})]));
    case "string":
      if (schema.format === "date-time") return new Date().toISOString();
      if (schema.format === "uri") return "https://example.com/return";
      if (schema.format === "email") return "someone@example.com";
      return "x".repeat(Math.max(1, schema.minLength ?? 1));
    default:
      return "x";
  }
}

/** Values outside the schema of one parameter, percent-encoded for a URL. */
function hostileParameterValue(parameter: Parameter): fc.Arbitrary<string> {
  const { schema } = parameter;
  // An empty path segment would address another route.
  const raw = parameter.in === "path" ? RAW_HOSTILE.filter((value) => value !== "") : RAW_HOSTILE;
  const beside: string[] = [];
  if (typeof schema.minimum === "number") beside.push(String(schema.minimum - 1));
  if (typeof schema.maximum === "number") beside.push(String(schema.maximum + 1));
  if (typeof schema.maxLength === "number") beside.push("b".repeat(schema.maxLength + 1));
  if (schema.enum?.length) beside.push(`${schema.enum[0]}x`, String(schema.enum[0]).toUpperCase());
  return fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...raw, ...beside) },
    { weight: 1, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 24 }).map((text) => encodeURIComponent(text)) },
    { weight: 1, arbitrary: fc.integer({ min: -1e12, max: 1e12 }).map(String) },
  );
}

/** A JSON value of a type the property does not have. */
function wrongType(schema: JSONSchema): fc.Arbitrary<unknown> {
  const all: Array<[string, unknown]> = [
    ["string", "text"],
    ["integer", 1.5],
    ["number", 7],
    ["boolean", false],
    ["null", null],
    ["array", [1]],
    ["object", { a: 1 }],
    ["long", LONG],
    ["negative", -1],
  ];
  const types = new Set([schema.type, ...(schema.anyOf ?? schema.oneOf ?? []).map((v: JSONSchema) => v.type)]);
  return fc.constantFrom(...all.filter(([type]) => !types.has(type)).map(([, value]) => value));
}

function bodyVariants(operation: Operation): fc.Arbitrary<{ variant: string; body: string; contentType: string | null }> {
  const schema = operation.jsonBody ?? { type: "object" };
  const valid = validValue(schema) as Record<string, unknown>;
  const properties = Object.keys(schema.properties ?? {});
  const json = (value: unknown) => JSON.stringify(value);
  const variants: Array<fc.Arbitrary<{ variant: string; body: string; contentType: string | null }>> = [
    fc
      .constantFrom("{", "[]", "null", '"text"', "123", "", "{}", '{"a":', "\u0000", '{"__proto__":{"x":1}}')
      .map((body) => ({ variant: `invalid JSON ${JSON.stringify(body)}`, body, contentType: "application/json" })),
    fc
      .constantFrom(
        "text/plain",
        "application/xml",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin1",
        "application/jsonx",
      )
      .map((contentType) => ({ variant: `content type ${contentType}`, body: json(valid), contentType })),
    fc.constant({ variant: "no content type", body: json(valid), contentType: null }),
    fc.constant({ variant: "extra field", body: json({ ...valid, unexpected: "field" }), contentType: "application/json" }),
    fc.constant({ variant: "valid body", body: json(valid), contentType: "application/json" }),
  ];
  if (properties.length > 0) {
    variants.push(
      fc.constantFrom(...properties).chain((name) =>
        wrongType(schema.properties[name]).map((value) => ({
          variant: `${name} of the wrong type`,
          body: json({ ...valid, [name]: value }),
          contentType: "application/json",
        })),
      ),
    );
  }
  const required: string[] = schema.required ?? [];
  if (required.length > 0) {
    variants.push(
      fc.constantFrom(...required).map((name) => {
        const { [name]: _, ...rest } = valid;
        return { variant: `${name} missing`, body: json(rest), contentType: "application/json" };
      }),
    );
  }
  return fc.oneof(...variants);
}

/** The path with every parameter given a valid value (own resources as per-server placeholders). */
function validPath(operation: Operation, override?: { name: string; value: string }): string {
  const own = OWN_RESOURCE.find(([pattern]) => pattern.test(operation.path))?.[1];
  return operation.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    if (name === override?.name) return override.value;
    if (name === "id" && own !== undefined) return own;
    const parameter = operation.parameters.find((p) => p.in === "path" && p.name === name);
    return encodeURIComponent(String(validValue(parameter?.schema ?? {})));
  });
}

function requestArbitrary(operation: Operation): fc.Arbitrary<HostileRequest> {
  const credential: HostileRequest["credential"] =
    operation.credentials.length === 0 || CREDENTIAL_ENDING.has(operation.operationId) ? "none" : operation.credentials[0]!;
  const base = (variant: string): HostileRequest => ({
    operationId: operation.operationId,
    variant,
    method: operation.method,
    path: validPath(operation),
    query: "",
    headers: {},
    credential,
    secured: operation.credentials.length > 0,
  });
  const kinds: Array<fc.Arbitrary<HostileRequest>> = [];
  const urlParameters = operation.parameters.filter((p) => p.in !== "header");
  if (urlParameters.length > 0) {
    kinds.push(
      fc.tuple(fc.constantFrom(...urlParameters), fc.boolean()).chain(([parameter, repeated]) =>
        hostileParameterValue(parameter).map((value) => {
          const request = base(`${parameter.in} ${parameter.name}=${value.slice(0, 40)}${repeated ? " (repeated)" : ""}`);
          if (parameter.in === "path") request.path = validPath(operation, { name: parameter.name, value });
          else request.query = repeated ? `${parameter.name}=${value}&${parameter.name}=${value}` : `${parameter.name}=${value}`;
          return request;
        }),
      ),
    );
  }
  const headerNames = Object.keys(odd) as Array<keyof typeof odd>;
  kinds.push(
    fc.tuple(fc.constantFrom(...headerNames), fc.nat()).map(([name, index]) => {
      const value = odd[name][index % odd[name].length]!;
      const request = base(`header ${name}: ${value.slice(0, 40)}`);
      request.headers[name] = value;
      return request;
    }),
  );
  if (operation.jsonBody !== null) {
    kinds.push(
      bodyVariants(operation).map(({ variant, body, contentType }) => {
        const request = base(variant);
        request.body = body;
        if (contentType !== null) request.headers["content-type"] = contentType;
        return request;
      }),
    );
  }
  if (operation.otherBodyTypes.length > 0) {
    kinds.push(
      fc
        .constantFrom("application/json", "text/plain", "text/csv", "application/x-ndjson")
        .map((type) => ({ ...base(`feed body as ${type}`), body: "not,a\nfeed", headers: { "content-type": type } })),
    );
  }
  kinds.push(fc.constant(base("valid request")));
  const withCredential = fc.oneof(...kinds);
  if (credential === "none") return withCredential;
  // Without a credential, whatever else is wrong: authentication comes first.
  return fc.oneof(
    { weight: 4, arbitrary: withCredential },
    { weight: 1, arbitrary: withCredential.map((request) => ({ ...request, variant: `${request.variant}, no credential`, credential: "none" as const })) },
  );
}

/** `count` requests spread evenly over the document's operations, drawn from `seed`. */
export function hostileRequests(document: JSONSchema, seed: number, count: number): HostileRequest[] {
  const operations = operationsOf(document);
  const perOperation = Math.ceil(count / operations.length);
  const requests = operations.flatMap((operation, index) => fc.sample(requestArbitrary(operation), { seed: seed + index, numRuns: perOperation }));
  // One order for both servers, shuffled from the seed, so state-changing requests interleave.
  return fc.sample(fc.shuffledSubarray(requests, { minLength: requests.length, maxLength: requests.length }), { seed, numRuns: 1 })[0]!;
}
