import { PROBLEMS, type ProblemSlug } from "./problem";

type JSONObject = Record<string, any>;

const REASON_PHRASES: Record<number, string> = { 200: "OK", 201: "Created", 202: "Accepted", 204: "No Content" };
const GENERATED_DESCRIPTION = /^Response for status \d+$|^RFC 9457 problem details$/;
const HTTP_METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);

function slugsOfStatus(status: number): ProblemSlug[] {
  return (Object.keys(PROBLEMS) as ProblemSlug[]).filter((slug) => PROBLEMS[slug].status === status || (slug === "invalid-body" && status === 422));
}

/**
 * What the generator cannot know, added to the document it builds from the route schemas: error
 * responses are `application/problem+json` with their slugs and one example per slug (typed with
 * this deployment's ERROR_TYPE_BASE); a schema's `contentMediaType` names its media type (HTML,
 * Prometheus text); generic response descriptions become the slugs or the reason phrase; body-less
 * responses lose the invalid `content` the generator gives them.
 */
export function finishOpenAPIDocument<T extends JSONObject>(generated: T, options: { typeBase: string }): T {
  const document = structuredClone(generated);
  for (const item of Object.values<JSONObject>(document.paths ?? {})) {
    for (const [method, operation] of Object.entries<JSONObject>(item)) {
      if (!HTTP_METHODS.has(method)) continue;
      for (const [statusText, response] of Object.entries<JSONObject>(operation.responses ?? {})) {
        const status = Number(statusText);
        // The generator writes a body-less response (204) as `content: { type: "null" }`, which is not OpenAPI.
        if (response.content !== undefined && typeof response.content.type === "string") delete response.content;
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
      }
    }
  }
  return document;
}
