import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { PROBLEMS } from "../../src/http/problem";
import { createTestContext, json, type TestContext } from "../support/context";

let context: TestContext;
let document: any;
beforeAll(async () => {
  context = await createTestContext({ PUBLIC_URL: "https://prices.example.com" });
  document = await json(await context.request("/openapi.json"));
});
afterAll(async () => {
  await context.close();
});

/** Every operation of the document as [label, operation]. */
function operations(): Array<[string, any]> {
  return Object.entries<any>(document.paths).flatMap(([path, item]) =>
    Object.entries<any>(item).map(([method, operation]): [string, any] => [`${method.toUpperCase()} ${path}`, operation]),
  );
}

describe("GET /openapi.json", () => {
  test("the document is a valid OpenAPI 3.1 document for a real validator", async () => {
    const validator = new Validator();
    const result = await validator.validate(document);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe("3.1");
  });

  test("every operation has a summary, a tag, a unique operationId, a success response and a 500 problem", () => {
    const ids = new Set<string>();
    for (const [label, operation] of operations()) {
      expect({ label, summary: typeof operation.summary }).toEqual({ label, summary: "string" });
      expect({ label, tags: operation.tags?.length > 0 }).toEqual({ label, tags: true });
      expect({ label, duplicate: ids.has(operation.operationId) }).toEqual({ label, duplicate: false });
      ids.add(operation.operationId);
      const statuses = Object.keys(operation.responses);
      expect({ label, success: statuses.some((status) => /^[23]/.test(status)) }).toEqual({ label, success: true });
      expect({ label, internal: statuses.includes("500") }).toEqual({ label, internal: true });
    }
    expect(ids.size).toBeGreaterThanOrEqual(5);
  });

  test("every error response is application/problem+json with an example per slug typed with this deployment's ERROR_TYPE_BASE", () => {
    for (const [label, operation] of operations()) {
      for (const [status, response] of Object.entries<any>(operation.responses)) {
        if (Number(status) < 400) continue;
        expect({ label, status, types: Object.keys(response.content) }).toEqual({ label, status, types: ["application/problem+json"] });
        const examples = Object.entries<any>(response.content["application/problem+json"].examples);
        expect(examples.length).toBeGreaterThan(0);
        for (const [slug, example] of examples) {
          expect(Object.keys(PROBLEMS)).toContain(slug);
          expect(example.value).toMatchObject({
            type: `https://prices.example.com/problems/${slug}`,
            title: PROBLEMS[slug as keyof typeof PROBLEMS].title,
            status: Number(status),
          });
          expect(response.description).toContain(slug);
        }
      }
    }
  });

  test("the data endpoint lists each outcome's slug, and its error examples carry the billing meta", () => {
    const responses = document.paths["/api/v1/products/{gtin}/price"].get.responses;
    const slugs = (status: number) => Object.keys(responses[status].content["application/problem+json"].examples);
    expect(slugs(400)).toEqual(["invalid-gtin", "invalid-parameter"]);
    expect(slugs(401)).toEqual(["unauthorized"]);
    expect(slugs(402)).toEqual(["insufficient-credits"]);
    expect(slugs(404)).toEqual(["product-not-found"]);
    expect(slugs(429)).toEqual(["rate-limited"]);
    expect(responses[402].content["application/problem+json"].examples["insufficient-credits"].value.meta).toMatchObject({
      reason: "insufficient-credits",
      billable: false,
    });
    expect(responses[200].content["application/json"].schema.examples[0].meta.reason).toBe("fresh-offer");
    expect(document.paths["/api/v1/products/{gtin}/price"].get.security).toEqual([{ apiKey: [] }]);
  });

  test("HTML and Prometheus responses are documented with their own media types", () => {
    expect(Object.keys(document.paths["/problems/{slug}"].get.responses[200].content)).toEqual(["text/html"]);
    expect(Object.keys(document.paths["/metrics"].get.responses[200].content)[0]).toStartWith("text/plain; version=0.0.4");
  });
});
