import { afterAll, beforeAll, expect, test } from "bun:test";
import { createServer } from "node:net";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { openDebitConnection, openPostgresClient } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { generateKeySecret } from "../../src/modules/keys/key-format";
import { createServices } from "../../src/services";

// PostgreSQL away (restarting, failing over, the network cut): the requests that need it answer 503
// `unavailable` with Retry-After, as problems, rather than 500 `internal`, and the log says why.
let app: ReturnType<typeof createApp>;
let store: PostgresStore;
const logs: string[] = [];
const logger = createLogger({ level: "warn", write: (chunk) => logs.push(chunk) });

beforeAll(async () => {
  // A port nothing listens on: every connection is refused.
  const closed = createServer();
  await new Promise<void>((listening) => closed.listen(0, "127.0.0.1", listening));
  const port = (closed.address() as { port: number }).port;
  await new Promise((done) => closed.close(done));
  const url = `postgres://postgres@127.0.0.1:${port}/test`;
  store = new PostgresStore(openPostgresClient(url), openDebitConnection(url));
  const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "warn" });
  app = createApp(createServices({ config, store, clock: new FakeClock(), logger }));
});

afterAll(async () => {
  await store.close();
});

test.each([
  ["a look-up", "/api/v1/products/4006381333931/price", "en", "The database could not be reached to finish this request; retry in a moment."],
  ["a balance read", "/api/v1/customer/billing/balance", "fr", "La base de données était injoignable pour traiter cette requête ; réessayez dans un instant."],
])("%s answers 503 unavailable with Retry-After while the database refuses connections", async (_, path, language, detail) => {
  const secret = generateKeySecret("pps_");
  const response = await app.handle(new Request(`http://localhost${path}`, { headers: { authorization: `Bearer ${secret}`, "accept-language": language } }));
  expect(response.status).toBe(503);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  expect(response.headers.get("retry-after")).toBe("1");
  const body = (await response.json()) as { type: string; status: number; detail: string; requestId: string };
  expect(body).toMatchObject({ type: "http://localhost:8080/problems/unavailable", status: 503, detail });
  logger.flush();
  const logged = logs.find((line) => line.includes(body.requestId))!;
  expect(JSON.parse(logged)).toMatchObject({ level: "warn", message: "database unreachable", code: "ECONNREFUSED" });
  expect(logged).not.toContain(secret.slice(8));
});

test("the process itself stays up: /healthz answers 200, /readyz 503", async () => {
  expect((await app.handle(new Request("http://localhost/healthz"))).status).toBe(200);
  expect((await app.handle(new Request("http://localhost/readyz"))).status).toBe(503);
});
