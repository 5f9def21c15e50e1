import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lintContract } from "../../tools/contract";
import { createTestContext, json, type TestContext } from "../support/context";

let context: TestContext;
let document: any;
beforeAll(async () => {
  context = await createTestContext({ PUBLIC_URL: "https://prices.example.org" });
  document = await json(await context.request("/openapi.json"));
});
afterAll(async () => {
  await context.close();
});

function operations(): Array<[string, any]> {
  return Object.entries<any>(document.paths).flatMap(([path, item]) =>
    Object.entries<any>(item).map(([method, operation]): [string, any] => [`${method.toUpperCase()} ${path}`, operation]),
  );
}

function operation(id: string): any {
  return operations().find(([, candidate]) => candidate.operationId === id)![1];
}

/** Every schema object below `value`, with where it is. */
function* schemas(value: unknown, where = ""): Generator<[string, any]> {
  if (value === null || typeof value !== "object") return;
  yield [where, value];
  for (const [key, item] of Object.entries(value)) yield* schemas(item, `${where}/${key}`);
}

describe("the OpenAPI document, as a generated client or a contract tool reads it", () => {
  test("a nullable constant is an enum that includes null (a `const` would refuse the null the service sends)", () => {
    const refusingNull: string[] = [];
    const walk = (value: unknown, path: string): void => {
      if (value === null || typeof value !== "object") return;
      const schema = value as Record<string, unknown>;
      if ("const" in schema && Array.isArray(schema.type) && schema.type.includes("null")) refusingNull.push(path);
      for (const [key, item] of Object.entries(schema)) walk(item, `${path}/${key}`);
    };
    walk(document, "#");
    expect(refusingNull).toEqual([]);
    expect(JSON.stringify(document)).toContain('"enum":["insufficient-credits",null]');
  });

  test("integers are plain `type: integer`, with no string alternative and no default 0", () => {
    const coerced = [...schemas(document.paths)].filter(([, schema]) => schema.format === "integer" || schema.format === "numeric").map(([where]) => where);
    expect(coerced).toEqual([]);
    const limit = operation("listApiKeys").parameters.find((parameter: any) => parameter.name === "limit");
    expect(limit.schema).toMatchObject({ type: "integer", minimum: 1, maximum: 100, default: 20 });
    const balance = operation("getBillingBalance").responses[200].content["application/json"].schema;
    expect(balance.properties.available).toMatchObject({ type: "integer", minimum: 0 });
    const catalog = operation("getBillingCatalog").responses[200].content["application/json"].schema;
    expect(catalog.properties.creditCost).toMatchObject({ type: "integer", minimum: 1 });
  });

  test("each response documents the headers the service sends with it", () => {
    const price = operation("getProductPrice").responses;
    expect(Object.keys(price[200].headers).sort()).toEqual(["Content-Language", "Idempotent-Replayed", "RateLimit", "RateLimit-Policy", "X-Request-Id"]);
    expect(Object.keys(price[429].headers)).toEqual(expect.arrayContaining(["Retry-After", "RateLimit", "RateLimit-Policy"]));
    expect(price[429].headers["Retry-After"]).toMatchObject({ required: true, schema: { type: "integer" } });
    for (const [label, candidate] of operations()) {
      for (const [status, response] of Object.entries<any>(candidate.responses)) {
        expect({ label, status, requestId: response.headers?.["X-Request-Id"]?.required }).toEqual({ label, status, requestId: true });
        if (status === "401") expect({ label, challenge: response.headers["WWW-Authenticate"]?.required }).toEqual({ label, challenge: true });
        if (status.startsWith("3")) expect({ label, location: response.headers.Location?.required }).toEqual({ label, location: true });
        const localized = Number(status) >= 400 || / \/(api|billing)\//.test(label);
        expect({ label, status, language: response.headers["Content-Language"]?.required }).toEqual({ label, status, language: localized ? true : undefined });
      }
    }
    expect(Object.keys(operation("createApiKey").responses[201].headers)).toContain("Idempotent-Replayed");
    expect(Object.keys(operation("developmentSignIn").responses[200].headers)).toContain("Set-Cookie");
    expect(Object.keys(operation("signOut").responses[204].headers)).toContain("Set-Cookie");
  });

  test("request bodies are documented only as application/json, the one type the service accepts, except the feed push's NDJSON and CSV", () => {
    expect(Object.keys(operation("pushFeed").requestBody.content)).toEqual(["application/x-ndjson", "text/csv"]);
    const bodies = operations().filter(([, candidate]) => candidate.requestBody !== undefined && candidate.operationId !== "pushFeed");
    expect(bodies.length).toBeGreaterThan(5);
    for (const [label, candidate] of bodies)
      expect({ label, types: Object.keys(candidate.requestBody.content) }).toEqual({ label, types: ["application/json"] });
  });

  test("HTML pages are text/html and redirects have a Location and no body", () => {
    for (const id of ["getBillingReturnPage", "getLocalCheckoutPage", "getLocalInvoicePage", "getLocalBillingPortal", "getProblemType"]) {
      expect({ id, types: Object.keys(operation(id).responses[200].content) }).toEqual({ id, types: ["text/html"] });
    }
    const redirects = operations().flatMap(([label, candidate]) =>
      Object.entries<any>(candidate.responses)
        .filter(([status]) => status.startsWith("3"))
        .map(([status, response]) => ({ label, status, response })),
    );
    expect(redirects.map(({ status }) => status).sort()).toEqual(["302", "303", "303", "303"]);
    for (const { label, response } of redirects) expect({ label, content: response.content }).toEqual({ label, content: undefined });
  });

  test("the server is PUBLIC_URL, credentials are security schemes, and problem examples carry their response's status", () => {
    expect(document.servers).toEqual([expect.objectContaining({ url: "https://prices.example.org" })]);
    expect(document.components.securitySchemes).toMatchObject({
      apiKey: { type: "http", scheme: "bearer" },
      session: { type: "apiKey", in: "cookie", name: "session" },
    });
    for (const [label, candidate] of operations()) {
      expect({ label, security: Array.isArray(candidate.security) }).toEqual({ label, security: true });
      const headers = (candidate.parameters ?? []).filter((parameter: any) => parameter.in === "header").map((parameter: any) => parameter.name.toLowerCase());
      expect({ label, authorization: headers.includes("authorization") }).toEqual({ label, authorization: false });
      for (const [status, response] of Object.entries<any>(candidate.responses)) {
        for (const media of Object.values<any>(response.content ?? {})) {
          for (const example of Object.values<any>(media.examples ?? {}))
            if (Number(status) >= 400) expect({ label, status: example.value.status }).toEqual({ label, status: Number(status) });
          if (Number(status) >= 400) expect({ label, status, schemaExamples: media.schema.examples }).toEqual({ label, status, schemaExamples: undefined });
        }
      }
    }
  });

  test("Spectral (spectral:oas) and Redocly (recommended) find no error in the served document", async () => {
    const directory = mkdtempSync(join(tmpdir(), "contract-test-"));
    try {
      const path = join(directory, "openapi.json");
      await Bun.write(path, JSON.stringify(document));
      const runs = await lintContract(path);
      for (const run of runs) expect({ tool: run.tool, ok: run.ok, output: run.ok ? "" : run.output }).toEqual({ tool: run.tool, ok: true, output: "" });
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  }, 60_000);
});
