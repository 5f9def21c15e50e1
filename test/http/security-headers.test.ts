import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { t } from "elysia";
import { createApp } from "../../src/app";
import { listenOptions } from "../../src/server";
import { createTestContext, json, type TestContext } from "../support/context";

describe("security headers", () => {
  test("every response, errors included, carries the security headers and no-store", async () => {
    const context = await createTestContext();
    for (const path of ["/healthz", "/api/v1/products/4006381333931/price", "/no-such-route"]) {
      const response = await context.request(path);
      expect(response.headers.get("x-content-type-options")).toBe("nosniff");
      expect(response.headers.get("x-frame-options")).toBe("DENY");
      expect(response.headers.get("referrer-policy")).toBe("no-referrer");
      expect(response.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
      expect(response.headers.get("permissions-policy")).toContain("camera=()");
      expect(response.headers.get("cache-control")).toBe("no-store");
    }
    await context.close();
  });

  test("Strict-Transport-Security is sent when PUBLIC_URL is https", async () => {
    const context = await createTestContext({ PUBLIC_URL: "https://prices.example.com" });
    expect((await context.request("/healthz")).headers.get("strict-transport-security")).toBe("max-age=31536000");
    expect((await context.request("/nope")).headers.get("strict-transport-security")).toBe("max-age=31536000");
    await context.close();
  });

  test("Strict-Transport-Security is not sent when PUBLIC_URL is plain http", async () => {
    const context = await createTestContext({ PUBLIC_URL: "http://localhost:8080" });
    expect((await context.request("/healthz")).headers.get("strict-transport-security")).toBeNull();
    await context.close();
  });

  test("the docs page gets a CSP that lets its own script run, and its script may be cached", async () => {
    const context = await createTestContext();
    const page = await context.request("/docs");
    expect(page.headers.get("content-security-policy")).toContain("script-src 'self'");
    expect(page.headers.get("content-security-policy")).toContain("connect-src 'self'");
    expect((await context.request("/docs/assets/scalar.js")).headers.get("cache-control")).toBe("public, max-age=86400");
    await context.close();
  });
});

/** The real app plus one route that parses a JSON body (the body limit applies where a body is parsed). */
function appWithEcho(context: TestContext) {
  return createApp(context.services).post("/echo", ({ body }) => ({ length: body.text.length }), { body: t.Object({ text: t.String() }) });
}

describe("request body limit over a real port", () => {
  let context: TestContext;
  let url: string;
  let app: ReturnType<typeof appWithEcho>;
  beforeAll(async () => {
    // Bun's backstop is the larger of 4 × BODY_LIMIT and 2 × FEED_BODY_LIMIT (the feed push streams larger bodies).
    context = await createTestContext({ BODY_LIMIT: "2048", FEED_BODY_LIMIT: "1024" });
    app = appWithEcho(context);
    app.listen(listenOptions(context.services.config, { port: 0, hostname: "127.0.0.1" }));
    url = `http://127.0.0.1:${app.server!.port}`;
  });
  afterAll(async () => {
    await app.stop(true);
    await context.close();
  });

  function chunked(text: string): ReadableStream<Uint8Array> {
    const bytes = new TextEncoder().encode(text);
    let offset = 0;
    return new ReadableStream({
      pull(controller) {
        if (offset >= bytes.length) return controller.close();
        controller.enqueue(bytes.slice(offset, (offset += 512)));
      },
    });
  }

  const post = (body: BodyInit, path = "/echo") =>
    fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body, duplex: "half" } as RequestInit);

  test("a body with Content-Length over BODY_LIMIT answers 413 payload-too-large as a problem and closes the connection", async () => {
    const response = await post(JSON.stringify({ text: "x".repeat(4096) }));
    expect(response.status).toBe(413);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    expect(response.headers.get("connection")).toBe("close");
    expect((await json(response)).type).toEndWith("/payload-too-large");
  });

  test("a chunked body over BODY_LIMIT answers 413 payload-too-large as a problem", async () => {
    const response = await post(chunked(JSON.stringify({ text: "x".repeat(8192) })));
    expect(response.status).toBe(413);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    expect((await json(response)).type).toEndWith("/payload-too-large");
  });

  test("a chunked body under BODY_LIMIT is parsed normally", async () => {
    const response = await post(chunked(JSON.stringify({ text: "x".repeat(1500) })));
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({ length: 1500 });
  });

  test("a body declared past Bun's backstop (4 × BODY_LIMIT here) is refused by Bun itself with a bare 413", async () => {
    const response = await post(JSON.stringify({ text: "x".repeat(4 * 2048) }));
    expect(response.status).toBe(413);
    expect(response.headers.get("content-type")).toBeNull();
  });
});
