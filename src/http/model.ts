import { type TSchema, Type } from "@sinclair/typebox";
import { t } from "elysia";
import { wholeNumber } from "./validation";
import { Problem, PROBLEMS, type ProblemSlug } from "./problem";

/**
 * An integer in a JSON body or response. Elysia's `t.Integer` also accepts numeric strings (for
 * query parameters) through a transform, which costs an encode pass on every response.
 */
export const Int = (options?: Parameters<typeof Type.Integer>[0]) => Type.Integer(options);

export const ProblemSchema = t.Object(
  {
    type: t.String({ format: "uri", examples: ["http://localhost:8080/problems/unauthorized"] }),
    title: t.String({ examples: ["Unauthorized"] }),
    status: Int({ examples: [401] }),
    detail: t.String({ examples: ["The API key is revoked."] }),
    requestId: t.Optional(t.String({ examples: ["req_0mwrd57q90000brqra5jtuxfecebe"] })),
  },
  { additionalProperties: true, description: "RFC 9457 problem details" },
);

export const MoneySchema = t.Object(
  {
    amount: Int({ description: "Minor units (cents for EUR)", examples: [1299] }),
    currency: t.String({ pattern: "^[A-Z]{3}$", examples: ["EUR"] }),
    formatted: t.String({ description: "Localized by the response language", examples: ["€12.99"] }),
  },
  { description: "An amount of money in integer minor units" },
);

export const Timestamp = t.String({ format: "date-time", examples: ["2026-11-22T10:00:00.000Z"] });

/**
 * An integer query parameter: decimal digits only, within bounds, else a 400 that says so in words.
 * Not `t.Integer`: its string branch takes whatever `Number()` reads as an integer (`0x10`, `1e1`,
 * a blank), and its range error names no parameter. Documented as `type: integer`
 * (finishOpenAPIDocument drops the text branch, marked `x-decimal-text`).
 */
export function QueryInteger(name: string, options: { minimum: number; maximum: number; default?: number; description?: string }) {
  const expected = wholeNumber(options.minimum, options.maximum);
  const invalid = new Problem("invalid-parameter", { detail: { en: `${name} must be ${expected.en}.`, fr: `${name} doit être ${expected.fr}.` } });
  return t
    .Transform(t.Union([t.String({ "x-decimal-text": true }), Type.Integer(options)], options))
    .Decode((value) => {
      const number = typeof value === "number" ? value : /^[0-9]{1,15}$/.test(value) ? Number(value) : Number.NaN;
      if (!Number.isSafeInteger(number) || number < options.minimum || number > options.maximum) throw invalid;
      return number;
    })
    .Encode((value) => value);
}

export const PageQuery = {
  limit: t.Optional(QueryInteger("limit", { minimum: 1, maximum: 100, default: 20, description: "Page size (1..100)" })),
  cursor: t.Optional(t.String({ maxLength: 200, description: "Opaque cursor from nextCursor" })),
};

export function pageOf<T extends import("@sinclair/typebox").TSchema>(item: T) {
  return t.Object({ items: t.Array(item), nextCursor: t.Union([t.String(), t.Null()]) });
}

/** An example problem body for `slug`, as the docs show it (`extensions` adds members such as `meta`). */
export function problemExample(slug: ProblemSlug, extensions: Record<string, unknown> = {}) {
  const entry = PROBLEMS[slug];
  return {
    type: `http://localhost:8080/problems/${slug}`,
    title: entry.title,
    status: entry.status,
    detail: entry.en,
    requestId: "req_0mwrd57q90000brqra5jtuxfecebe",
    ...extensions,
  };
}

/**
 * A problem response that can carry only these slugs. The OpenAPI document lists them
 * (`x-problem-types`) with one example each; without it, a status lists every slug of its status.
 */
export function Problems(slugs: ProblemSlug[]) {
  return t.Object(ProblemSchema.properties, {
    additionalProperties: true,
    description: `Problem details: ${slugs.join(", ")}`,
    examples: slugs.map((slug) => problemExample(slug)),
    "x-problem-types": slugs,
  });
}

/** Error responses every route documents; routes add their own on top. */
export const CommonErrors = {
  400: Problems(["invalid-parameter", "invalid-body"]),
  413: Problems(["payload-too-large"]),
  415: Problems(["unsupported-media-type"]),
  422: Problems(["unprocessable-body"]),
  500: Problems(["internal"]),
  503: Problems(["unavailable"]),
} as const;

/**
 * The problem schemas of a billed endpoint, whose problems carry the request's billing `meta` as an
 * extension member: `metaOf(slug)` is the example meta of each listed slug.
 */
export function problemsWithMeta(meta: TSchema, metaOf: (slug: ProblemSlug) => object) {
  return (slugs: ProblemSlug[]) =>
    t.Composite([ProblemSchema, t.Object({ meta })], {
      additionalProperties: true,
      description: `Problem details with the request's billing meta: ${slugs.join(", ")}`,
      examples: slugs.map((slug) => problemExample(slug, { meta: metaOf(slug) })),
      "x-problem-types": slugs,
    });
}
