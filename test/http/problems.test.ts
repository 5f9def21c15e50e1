import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { PROBLEMS } from "../../src/http/problem";
import { createTestContext, json, type TestContext } from "../support/context";

let context: TestContext;
beforeAll(async () => {
  context = await createTestContext({ BODY_LIMIT: "2048" });
});
afterAll(async () => {
  await context.close();
});

describe("problem details for every error", () => {
  test("an unknown route answers 404 not-found as application/problem+json with a request id", async () => {
    const response = await context.request("/api/v1/nothing-here");
    expect(response.status).toBe(404);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    const body = await json(response);
    expect(body).toMatchObject({ type: "http://localhost:8080/problems/not-found", title: "Not Found", status: 404 });
    expect(body.requestId).toBe(response.headers.get("x-request-id")!);
  });

  test("the problem detail follows Accept-Language", async () => {
    const body = await json(await context.request("/nope", { headers: { "accept-language": "fr" } }));
    expect(body.detail).toBe("Aucune route ne correspond à cette méthode et ce chemin.");
    expect(body.title).toBe("Not Found");
  });

  test("a body larger than BODY_LIMIT answers 413 payload-too-large", async () => {
    const body = JSON.stringify({ a: "x".repeat(4096) });
    const response = await context.request("/api/v1/anything", {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": String(body.length) },
      body,
    });
    expect(response.status).toBe(413);
    expect((await json(response)).type).toEndWith("/payload-too-large");
  });

  test("a non-JSON body to an API route answers 415 unsupported-media-type", async () => {
    const response = await context.request("/api/v1/anything", { method: "POST", headers: { "content-type": "text/plain" }, body: "hello" });
    expect(response.status).toBe(415);
    expect((await json(response)).type).toEndWith("/unsupported-media-type");
  });

  test("every response carries the security headers and a request id", async () => {
    const response = await context.request("/healthz");
    expect(response.headers.get("x-content-type-options")).toBe("nosniff");
    expect(response.headers.get("x-frame-options")).toBe("DENY");
    expect(response.headers.get("x-request-id")).toMatch(/^req_[0-9a-z]+$/);
  });
});

describe("GET /problems/{slug}", () => {
  test.each(Object.keys(PROBLEMS))("serves a human page for %s", async (slug) => {
    const response = await context.request(`/problems/${slug}`);
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toStartWith("text/html");
    expect(await response.text()).toContain(PROBLEMS[slug as keyof typeof PROBLEMS].title);
  });

  test.each(["no-such-thing", "constructor", "toString", "__proto__", "hasOwnProperty"])("an unknown slug (%s) answers 404 not-found", async (slug) => {
    const response = await context.request(`/problems/${slug}`);
    expect(response.status).toBe(404);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
  });
});

describe("operations endpoints", () => {
  test("/healthz answers ok and /readyz reports the reachable database", async () => {
    expect(await json(await context.request("/healthz"))).toEqual({ status: "ok" });
    expect(await json(await context.request("/readyz"))).toEqual({ status: "ready", database: context.store.dialect });
  });

  test("/readyz answers 503 unavailable when the database is closed", async () => {
    const broken = await createTestContext();
    await broken.store.close();
    const response = await broken.request("/readyz");
    expect(response.status).toBe(503);
    expect((await json(response)).type).toEndWith("/unavailable");
  });

  test("/openapi.json documents the price endpoint with its error responses", async () => {
    const document = await json(await context.request("/openapi.json"));
    const operation = document.paths["/api/v1/products/{gtin}/price"].get;
    expect(operation.operationId).toBe("getProductPrice");
    expect(Object.keys(operation.responses)).toEqual(expect.arrayContaining(["200", "400", "401", "402", "404", "429"]));
  });

  test("/docs serves the reference page with its script from the service itself, not a CDN", async () => {
    const html = await (await context.request("/docs")).text();
    expect(html).toContain('src="/docs/assets/scalar.js"');
    expect(html).not.toMatch(/src="https?:\/\//);
    const script = await context.request("/docs/assets/scalar.js");
    expect(script.status).toBe(200);
    expect(script.headers.get("content-type")).toStartWith("text/javascript");
  });
});
