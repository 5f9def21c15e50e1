import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CLIENT_DIRECTORY, clientFiles, freshClientFiles } from "../../tools/client";
import { startServer, type RunningServer } from "../../src/server";
import { addProduct, createOrganization, createTestContext, signIn, type TestContext, type TestOrganization, type TestSession } from "../support/context";
import { createClient } from "./generated/client";
import { readResponseHeaders } from "./generated/headers.gen";
import { createApiKey, getHealth, getProductPrice, listApiKeys } from "./generated/sdk.gen";

let context: TestContext;
let server: RunningServer;
let org: TestOrganization;
let session: TestSession;
let client: ReturnType<typeof createClient>;

beforeAll(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 1);
  session = await signIn(context, "integrator@example.org");
  await addProduct(context, "04006381333931", [{ merchantId: "m-1", price: 1299, ageMs: 60_000 }]);
  server = await startServer(context.services, { port: 0, hostname: "127.0.0.1" });
  // The credentials as an integrator passes them: the API key for `bearer`, the session token for the `session` cookie scheme.
  client = createClient({ baseUrl: server.url, auth: (scheme) => (scheme.type === "http" ? org.clearKey : session.token) });
});
afterAll(async () => {
  await server.stop();
  await context.close();
});

/** The RateLimit draft's `r` (requests left), from the typed RateLimit header. */
function remainingRequests(rateLimit: string | undefined): number {
  return Number(/;r=(\d+)/.exec(rateLimit ?? "")?.[1]);
}

describe("a client generated from /openapi.json by @hey-api/openapi-ts", () => {
  test("the committed client matches the document the service serves (else run: bun run generate:client)", async () => {
    expect(clientFiles(CLIENT_DIRECTORY)).toEqual(await freshClientFiles());
  }, 30_000);

  test("a look-up over a real port returns the typed envelope with integers as numbers, and its rate-limit headers", async () => {
    const { data, error, response } = await getProductPrice({ client, path: { gtin: "4006381333931" }, query: { language: "fr" } });
    expect(error).toBeUndefined();
    expect(response.status).toBe(200);
    // Typed as number, not string | number: these assignments are checked by tsc --strict.
    const remaining: number = data!.meta.creditsRemaining;
    const amount: number = data!.data.offers[0]!.price.amount;
    expect([remaining, amount]).toEqual([0, 1299]);
    expect(data!.meta).toMatchObject({ gtin: "04006381333931", reason: "fresh-offer", billable: true, creditsConsumed: 1 });
    // The documented headers of this operation's 200, typed: the policy is required, RateLimit optional, Content-Language a language.
    const headers = readResponseHeaders("getProductPrice", 200, response);
    const policy: string = headers["ratelimit-policy"];
    const language: "en" | "fr" = headers["content-language"];
    expect(headers["x-request-id"]).toBe(data!.meta.requestId);
    expect([policy.startsWith('"default";q='), language]).toEqual([true, "fr"]);
    expect(remainingRequests(headers.ratelimit)).toBeGreaterThan(0);
    expect(headers["idempotent-replayed"]).toBeUndefined();
  });

  test("a documented error comes back as a typed problem with its meta", async () => {
    const { data, error, response } = await getProductPrice({ client, path: { gtin: "4006381333931" } });
    expect(data).toBeUndefined();
    expect(response.status).toBe(402);
    expect(readResponseHeaders("getProductPrice", 402, response)["ratelimit-policy"]).toStartWith('"default";q=');
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    expect(error).toMatchObject({
      type: "http://localhost:8080/problems/insufficient-credits",
      status: 402,
      meta: { reason: "insufficient-credits", creditsRemaining: 0 },
    });
  });

  test("it creates a key with an Idempotency-Key, replays it, and lists keys with an integer limit", async () => {
    const create = () => createApiKey({ client, body: { name: "generated client" }, headers: { "idempotency-key": "generated-client-1" } });
    const first = await create();
    expect(first.response.status).toBe(201);
    expect(first.data!.key).toMatchObject({ name: "generated client", status: "ACTIVE" });
    expect(readResponseHeaders("createApiKey", 201, first.response)["idempotent-replayed"]).toBeUndefined();
    const replay = await create();
    expect(replay.response.status).toBe(201);
    const replayed: "true" | undefined = readResponseHeaders("createApiKey", 201, replay.response)["idempotent-replayed"];
    expect(replayed).toBe("true");
    expect(replay.data!.clearKey).toBe(first.data!.clearKey);

    const limit: number = 1;
    const page = await listApiKeys({ client, query: { limit } });
    expect(page.response.status).toBe(200);
    expect(page.data!.items.map((key) => key.name)).toEqual(["generated client"]);
    expect(page.data!.nextCursor).toBeNull();
  });

  test("it reads the operations endpoints", async () => {
    expect((await getHealth({ client })).data).toEqual({ status: "ok" });
  });
});
