import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addProduct, createOrganization, createTestContext, type TestContext, type TestOrganization } from "../support/context";

let context: TestContext;
let org: TestOrganization;

beforeEach(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 2);
  await addProduct(context, "04006381333931", [{ merchantId: "m-1", price: 199, ageMs: 60_000 }]);
});
afterEach(async () => {
  await context.close();
});

const price = (gtin: string, headers: Record<string, string> = org.auth) => context.request(`/api/v1/products/${gtin}/price?language=fr`, { headers });

/** The access-log lines written so far (the logger writes once per tick). */
async function accessLog(): Promise<Array<Record<string, unknown>>> {
  await afterResponses();
  context.services.logger.flush();
  return context.logs
    .join("")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line))
    .filter((entry) => entry.message === "request");
}

/** The afterResponse hooks (log line, metrics) run in a setImmediate once a response is handed over. */
const afterResponses = () => new Promise((resolve) => setImmediate(resolve));

async function metrics(): Promise<string> {
  await afterResponses();
  const response = await context.request("/metrics");
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  return response.text();
}

describe("access log", () => {
  test("each request writes one JSON line with requestId, method, route, path, status, duration, key prefix and reason", async () => {
    const response = await price("4006381333931");
    const lines = await accessLog();
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: "info",
      requestId: response.headers.get("x-request-id")!,
      method: "GET",
      route: "/api/v1/products/:gtin/price",
      path: "/api/v1/products/4006381333931/price",
      status: 200,
      keyPrefix: org.clearKey.slice(0, 8),
      reason: "fresh-offer",
    });
    expect(typeof lines[0]!.durationMs).toBe("number");
    expect(typeof lines[0]!.time).toBe("string");
  });

  test("errors are logged with the status the client received, unknown routes as unmatched", async () => {
    await price("4006381333932");
    await context.request("/no/such/route");
    await context.request("/api/v1/x", { method: "POST", headers: { "content-type": "text/plain" }, body: "hello" });
    const lines = await accessLog();
    expect(lines.map((line) => [line.route, line.status, line.reason])).toEqual([
      ["/api/v1/products/:gtin/price", 400, "invalid-gtin"],
      ["unmatched", 404, undefined],
      ["unmatched", 415, undefined],
    ]);
  });

  test("a secret never reaches the log: a valid key shows only its 8-character prefix, a malformed one nothing", async () => {
    await price("4006381333931");
    await price("4006381333931", { authorization: "Bearer sk_live_not-our-key-but-a-secret" });
    const tampered = org.clearKey.slice(0, -1) + (org.clearKey.endsWith("x") ? "y" : "x");
    await price("4006381333931", { authorization: `Bearer ${tampered}` });
    const text = context.logs.join("");
    expect(text).not.toContain(org.clearKey);
    expect(text).not.toContain(org.clearKey.slice(0, 12));
    expect(text).not.toContain("sk_live");
    const lines = await accessLog();
    expect(lines.map((line) => line.keyPrefix)).toEqual([org.clearKey.slice(0, 8), undefined, undefined]);
  });

  test("LOG_LEVEL=warn turns the access log off", async () => {
    const quiet = await createTestContext({ LOG_LEVEL: "warn" });
    await quiet.request("/healthz");
    await afterResponses();
    quiet.services.logger.flush();
    expect(quiet.logs.join("")).toBe("");
    await quiet.close();
  });
});

describe("GET /metrics", () => {
  test("counts requests by method, route, status and billing reason, and credits debited", async () => {
    await price("4006381333931");
    await price("4006381333931");
    await price("4006381333931");
    await price("123");
    const text = await metrics();
    const route = 'route="/api/v1/products/:gtin/price"';
    expect(text).toContain(`price_service_http_requests_total{method="GET",${route},status="200",reason="fresh-offer"} 2`);
    expect(text).toContain(`price_service_http_requests_total{method="GET",${route},status="402",reason="insufficient-credits"} 1`);
    expect(text).toContain(`price_service_http_requests_total{method="GET",${route},status="400",reason="invalid-gtin"} 1`);
    expect(text).toContain("price_service_credits_debited_total 2\n");
  });

  test("has latency histograms per route and timings per store operation", async () => {
    await price("4006381333931");
    const text = await metrics();
    expect(text).toContain("# TYPE price_service_http_request_duration_seconds histogram");
    expect(text).toContain('price_service_http_request_duration_seconds_bucket{method="GET",route="/api/v1/products/:gtin/price",le="+Inf"} 1');
    expect(text).toContain('price_service_http_request_duration_seconds_count{method="GET",route="/api/v1/products/:gtin/price"} 1');
    for (const operation of ["findKeyCredential", "reserveCredits", "findProductWithOffers", "commitReservation"]) {
      expect(text).toContain(`price_service_db_operation_duration_seconds_count{operation="${operation}"} 1`);
    }
    expect(text).toMatch(/^process_resident_memory_bytes \d+$/m);
    expect(text).toMatch(/^price_service_build_info\{version="\d+\.\d+\.\d+"\} 1$/m);
  });

  test("a store call that throws is counted as an error of its operation", async () => {
    await context.store.close();
    await context.request("/readyz");
    await price("4006381333931");
    const text = await metrics();
    expect(text).toMatch(/^price_service_db_operation_errors_total\{operation="findKeyCredential"\} 1$/m);
  });

  test("every line is valid Prometheus text: HELP and TYPE before each family, one sample per line", async () => {
    await price("4006381333931");
    const text = await metrics();
    for (const line of text.trimEnd().split("\n")) {
      expect(line).toMatch(/^(# (HELP|TYPE) [a-z_]+ .+|[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+|[a-z_]+(\{.*\})? \+Inf)$/);
    }
  });
});
