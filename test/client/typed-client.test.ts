import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import createClient from "openapi-fetch";
import { readFileSync } from "node:fs";
import { CLIENT_TYPES_FILE, clientTypes } from "../../scripts/generate-client";
import { startServer, type RunningServer } from "../../src/server";
import { addProduct, createOrganization, createTestContext, type TestContext, type TestOrganization } from "../helpers";
import type { paths } from "./price-service-api";

let context: TestContext;
let server: RunningServer;
let org: TestOrganization;
let client: ReturnType<typeof createClient<paths>>;

beforeAll(async () => {
  context = await createTestContext();
  org = await createOrganization(context, 1);
  await addProduct(context, "04006381333931", [{ merchantId: "m-1", price: 1299, ageMs: 60_000 }]);
  server = await startServer(context.services, { port: 0, hostname: "127.0.0.1" });
  client = createClient<paths>({ baseUrl: server.url });
});
afterAll(async () => {
  await server.stop();
});

describe("a client generated from /openapi.json (openapi-typescript + openapi-fetch)", () => {
  test("the committed client types match the document the service serves (else run: bun run generate:client)", async () => {
    expect(readFileSync(CLIENT_TYPES_FILE, "utf8")).toBe(await clientTypes());
  });

  test("it makes a billed look-up over a real port and reads the typed envelope", async () => {
    const { data, error, response } = await client.GET("/api/v1/products/{gtin}/price", {
      params: { path: { gtin: "4006381333931" }, query: { language: "fr" }, header: { authorization: org.auth.authorization } },
    });
    expect(error).toBeUndefined();
    expect(response.status).toBe(200);
    expect(data!.meta).toMatchObject({ gtin: "04006381333931", reason: "fresh-offer", billable: true, creditsConsumed: 1, creditsRemaining: 0 });
    expect(data!.data.offers[0]!.price).toEqual({ amount: 1299, currency: "EUR", formatted: "12,99 €" });
    expect(response.headers.get("x-request-id")).toBe(data!.meta.requestId);
  });

  test("it reads a documented error as a typed problem with its meta", async () => {
    const { data, error, response } = await client.GET("/api/v1/products/{gtin}/price", {
      params: { path: { gtin: "4006381333931" }, header: { authorization: org.auth.authorization } },
    });
    expect(data).toBeUndefined();
    expect(response.status).toBe(402);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    expect(error).toMatchObject({ type: "http://localhost:8080/problems/insufficient-credits", status: 402, meta: { reason: "insufficient-credits", creditsRemaining: 0 } });
  });

  test("it reads the operations endpoints", async () => {
    expect((await client.GET("/healthz")).data).toEqual({ status: "ok" });
    expect((await client.GET("/readyz")).data).toEqual({ status: "ready", database: context.store.dialect });
  });
});
