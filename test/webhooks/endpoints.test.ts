import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { createTestContext, json, queryRows, signIn, type TestContext, type TestSession } from "../support/context";
import { securityTests } from "../support/security";

const WEBHOOKS = "/api/v1/customer/webhooks";
const ENDPOINT_FIELDS = ["createdAt", "disabledAt", "eventTypes", "failingSince", "id", "status", "url"];

let context: TestContext;
let ada: TestSession;
let eve: TestSession;

beforeEach(async () => {
  context = await createTestContext();
  ada = await signIn(context, "ada@example.com");
  eve = await signIn(context, "eve@example.com");
});

afterEach(async () => {
  await context.close();
});

function send(method: string, path: string, session: TestSession, body?: unknown): Promise<Response> {
  return context.request(path, {
    method,
    headers: { ...session.headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function create(
  session: TestSession,
  body: unknown = { url: "https://hooks.example.com/in", eventTypes: ["credits.low", "key.created"] },
): Promise<{ endpoint: any; secret: string }> {
  const response = await send("POST", WEBHOOKS, session, body);
  expect(response.status).toBe(201);
  return json(response);
}

async function expectProblem(response: Response, status: number, slug: string): Promise<any> {
  expect(response.status).toBe(status);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  const body = await json(response);
  expect(body.type).toEndWith(`/${slug}`);
  return body;
}

describe("POST /api/v1/customer/webhooks", () => {
  test("creates an enabled endpoint and shows its whsec_ secret once", async () => {
    const response = await send("POST", WEBHOOKS, ada, { url: "https://hooks.example.com/in#ignored", eventTypes: ["credits.low"] });
    expect(response.status).toBe(201);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const { endpoint, secret } = await json(response);
    expect(Object.keys(endpoint).sort()).toEqual(ENDPOINT_FIELDS);
    expect(endpoint).toMatchObject({
      url: "https://hooks.example.com/in",
      eventTypes: ["credits.low"],
      status: "enabled",
      failingSince: null,
      disabledAt: null,
    });
    expect(endpoint.id).toStartWith("whe_");
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const listed = await json(await send("GET", WEBHOOKS, ada));
    expect(JSON.stringify(listed)).not.toContain(secret);
    expect(context.logs.join("")).not.toContain(secret);
  });

  test("refuses plain http outside development mode, and loopback, link-local and private addresses, with a French detail when asked", async () => {
    const production = await createTestContext({ PRICE_ENV: "production", WEBHOOK_ALLOWED_NETWORKS: "10.20.0.0/16" });
    try {
      const session = await signIn(production, "ops@example.com");
      const attempt = (url: string, language = "en") =>
        production.request(WEBHOOKS, {
          method: "POST",
          headers: { ...session.headers, "content-type": "application/json", "accept-language": language },
          body: JSON.stringify({ url, eventTypes: ["key.created"] }),
        });
      for (const url of [
        "http://hooks.example.com/in",
        "https://127.0.0.1/in",
        "https://[::1]/in",
        "https://169.254.169.254/latest",
        "https://192.168.1.10/in",
        "https://10.0.0.1/in",
        "https://user:pw@hooks.example.com/in",
      ]) {
        expect({ url, status: (await attempt(url)).status }).toEqual({ url, status: 422 });
      }
      const french = await json(await attempt("https://10.0.0.1/in", "fr"));
      expect(french.detail).toContain("adresse");
      // A listed on-premises network is reachable, over plain http too.
      for (const url of ["https://10.20.1.2/in", "http://10.20.1.2:8080/in", "https://hooks.example.com/in"]) {
        expect({ url, status: (await attempt(url)).status }).toEqual({ url, status: 201 });
      }
    } finally {
      await production.close();
    }
  });

  test("an unknown event type, no event type or no URL is refused", async () => {
    await expectProblem(await send("POST", WEBHOOKS, ada, { url: "https://a.example/x", eventTypes: ["credits.stolen"] }), 422, "unprocessable-body");
    await expectProblem(await send("POST", WEBHOOKS, ada, { url: "https://a.example/x", eventTypes: [] }), 422, "unprocessable-body");
    await expectProblem(await send("POST", WEBHOOKS, ada, { eventTypes: ["key.created"] }), 422, "unprocessable-body");
    await expectProblem(await send("POST", WEBHOOKS, ada, { url: "not a url", eventTypes: ["key.created"] }), 422, "unprocessable-body");
  });

  securityTests(
    { method: "POST", path: () => WEBHOOKS, body: () => ({ url: "https://a.example/x", eventTypes: ["key.created"] }), accepts: "session" },
    () => context,
  );
});

describe("GET /api/v1/customer/webhooks", () => {
  test("lists the organization's endpoints newest first, in pages, and no other organization's", async () => {
    const first = await create(ada);
    const second = await create(ada);
    await create(eve);
    const page = await json(await send("GET", `${WEBHOOKS}?limit=1`, ada));
    expect(page.items.map((item: any) => item.id)).toEqual([second.endpoint.id]);
    const next = await json(await send("GET", `${WEBHOOKS}?limit=1&cursor=${page.nextCursor}`, ada));
    expect(next).toEqual({ items: [first.endpoint], nextCursor: null });
  });

  securityTests({ method: "GET", path: () => WEBHOOKS, accepts: "session" }, () => context);
});

describe("one endpoint", () => {
  test("another organization's endpoint is 404 for every operation, and stays as it was", async () => {
    const { endpoint } = await create(ada);
    for (const [method, suffix] of [
      ["GET", ""],
      ["DELETE", ""],
      ["POST", "/rotate-secret"],
      ["POST", "/enable"],
      ["POST", "/test"],
      ["GET", "/deliveries"],
    ] as const) {
      const body = await expectProblem(await send(method, `${WEBHOOKS}/${endpoint.id}${suffix}`, eve), 404, "not-found");
      expect(body.detail).not.toContain(endpoint.id);
    }
    expect(await json(await send("GET", `${WEBHOOKS}/${endpoint.id}`, ada))).toEqual(endpoint);
    expect(await queryRows(context.store, "SELECT id FROM webhook_events WHERE type = 'webhook.test'")).toEqual([]);
  });

  test("rotating gives a new secret and keeps the endpoint", async () => {
    const { endpoint, secret } = await create(ada);
    const response = await send("POST", `${WEBHOOKS}/${endpoint.id}/rotate-secret`, ada);
    expect(response.status).toBe(200);
    const rotated = await json(response);
    expect(rotated.endpoint).toEqual(endpoint);
    expect(rotated.secret).toStartWith("whsec_");
    expect(rotated.secret).not.toBe(secret);
  });

  test("enabling an enabled endpoint changes nothing", async () => {
    const { endpoint } = await create(ada);
    const response = await send("POST", `${WEBHOOKS}/${endpoint.id}/enable`, ada);
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual(endpoint);
  });

  test("deleting removes the endpoint and its delivery log", async () => {
    const { endpoint } = await create(ada);
    expect((await send("POST", `${WEBHOOKS}/${endpoint.id}/test`, ada)).status).toBe(202);
    const response = await send("DELETE", `${WEBHOOKS}/${endpoint.id}`, ada);
    expect(response.status).toBe(204);
    await expectProblem(await send("GET", `${WEBHOOKS}/${endpoint.id}`, ada), 404, "not-found");
    await expectProblem(await send("DELETE", `${WEBHOOKS}/${endpoint.id}`, ada), 404, "not-found");
    expect(await queryRows(context.store, "SELECT event_id FROM webhook_deliveries")).toEqual([]);
  });

  test("a test event shows in the delivery log as pending until the worker sends it", async () => {
    const { endpoint } = await create(ada);
    const { eventId } = await json(await send("POST", `${WEBHOOKS}/${endpoint.id}/test`, ada));
    const log = await json(await send("GET", `${WEBHOOKS}/${endpoint.id}/deliveries`, ada));
    expect(log).toEqual({
      items: [
        {
          eventId,
          eventType: "webhook.test",
          state: "pending",
          attempts: 0,
          lastStatus: null,
          lastResponse: null,
          lastAttemptAt: null,
          nextAttemptAt: new Date(context.clock.now()).toISOString(),
          createdAt: new Date(context.clock.now()).toISOString(),
        },
      ],
      nextCursor: null,
    });
  });

  test("the delivery log pages with its cursor and refuses one it did not give", async () => {
    const { endpoint } = await create(ada);
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      ids.push((await json(await send("POST", `${WEBHOOKS}/${endpoint.id}/test`, ada))).eventId);
      context.clock.advance(1000);
    }
    const first = await json(await send("GET", `${WEBHOOKS}/${endpoint.id}/deliveries?limit=2`, ada));
    expect(first.items.map((item: any) => item.eventId)).toEqual([ids[2], ids[1]]);
    const second = await json(await send("GET", `${WEBHOOKS}/${endpoint.id}/deliveries?limit=2&cursor=${first.nextCursor}`, ada));
    expect(second).toMatchObject({ items: [{ eventId: ids[0] }], nextCursor: null });
    await expectProblem(await send("GET", `${WEBHOOKS}/${endpoint.id}/deliveries?cursor=bogus`, ada), 400, "invalid-parameter");
  });

  securityTests({ method: "DELETE", path: () => `${WEBHOOKS}/whe_0000000000000unknown000000`, accepts: "session" }, () => context);
});

describe("/api/v1/customer/webhooks/settings", () => {
  test("the low-credit threshold is unset at first, settable, clearable, and per organization", async () => {
    expect(await json(await send("GET", `${WEBHOOKS}/settings`, ada))).toEqual({ lowCreditThreshold: null });
    const response = await send("PATCH", `${WEBHOOKS}/settings`, ada, { lowCreditThreshold: 250 });
    expect(response.status).toBe(200);
    expect(await json(response)).toEqual({ lowCreditThreshold: 250 });
    expect(await json(await send("GET", `${WEBHOOKS}/settings`, ada))).toEqual({ lowCreditThreshold: 250 });
    expect(await json(await send("GET", `${WEBHOOKS}/settings`, eve))).toEqual({ lowCreditThreshold: null });
    expect(await json(await send("PATCH", `${WEBHOOKS}/settings`, ada, { lowCreditThreshold: null }))).toEqual({ lowCreditThreshold: null });
  });

  test("a threshold that is not a positive whole number is refused", async () => {
    for (const lowCreditThreshold of [0, -5, 2.5, "100"])
      await expectProblem(await send("PATCH", `${WEBHOOKS}/settings`, ada, { lowCreditThreshold }), 422, "unprocessable-body");
  });

  securityTests({ method: "PATCH", path: () => `${WEBHOOKS}/settings`, body: () => ({ lowCreditThreshold: 10 }), accepts: "session" }, () => context);
});

test("the OpenAPI document lists every webhook endpoint operation, session only, with its problems", async () => {
  const document = await json(await context.request("/openapi.json"));
  const operations = Object.entries<Record<string, any>>(document.paths)
    .filter(([path]) => path.startsWith(WEBHOOKS))
    .flatMap(([path, methods]) => Object.values(methods).map((operation) => ({ path, ...operation })));
  expect(operations.map((op) => op.operationId).sort()).toEqual([
    "createWebhookEndpoint",
    "deleteWebhookEndpoint",
    "enableWebhookEndpoint",
    "getWebhookEndpoint",
    "getWebhookSettings",
    "listWebhookDeliveries",
    "listWebhookEndpoints",
    "rotateWebhookSecret",
    "sendWebhookTestEvent",
    "updateWebhookSettings",
  ]);
  for (const op of operations) {
    expect(op.security).toEqual([{ session: [] }]);
    expect(op.tags).toEqual(["Webhook endpoints"]);
    expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["401", "403"]));
    if (op.path.includes("{id}")) expect(Object.keys(op.responses)).toContain("404");
  }
});
