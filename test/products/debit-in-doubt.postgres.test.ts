import { afterEach, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { openDebitConnection } from "../../src/db/postgres-client";
import type { PostgresStore } from "../../src/db/postgres-store";
import { FakeClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createServices, openStore } from "../../src/services";
import { addProduct, createOrganization, createTestDatabase, json, ledgerSum, queryRows, type TestContext, type TestDatabase } from "../support/context";
import { startCommitAnswerLoss } from "../support/postgres-relay";

// A look-up whose debit is in doubt: PostgreSQL took its COMMIT, the answer never came back, and the
// database stayed away for longer than a debit waits for it. Its 503 must not claim it was not billed.
const FRESH = "04006381333931";

let database: TestDatabase | undefined;
let context: TestContext | undefined;
const cleanUps: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const cleanUp of cleanUps.splice(0).reverse()) await cleanUp();
  await context?.close();
  await database?.drop();
  context = undefined;
  database = undefined;
});

test("a debit in doubt answers a 503 that says it may have been billed; the ledger then shows it, and a retry with the same Idempotency-Key answers it without billing twice", async () => {
  database = await createTestDatabase();
  const store = (await openStore(database.url)) as PostgresStore;
  store.lostConnectionPatienceMs = 1_000;
  const logs: string[] = [];
  const clock = new FakeClock();
  const services = createServices({
    config: loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "warn", RATE_LIMIT: "100000/s" }),
    store,
    clock,
    logger: createLogger({ level: "warn", write: (line) => logs.push(line) }),
  });
  const app = createApp(services);
  context = {
    app,
    services,
    store,
    clock,
    logs,
    request: (path, init) => app.handle(new Request(`http://localhost${path}`, init)),
    close: () => store.close(),
  };
  const org = await createOrganization(context, 10);
  await addProduct(context, FRESH, [{ merchantId: "m-1", price: 199, ageMs: 0 }]);

  // The debits' connection goes through a relay: PostgreSQL takes the first COMMIT, its answer is
  // lost, and it refuses connections for 2.5 s.
  const relay = await startCommitAnswerLoss(database.url, 2_500);
  const debitConnection = openDebitConnection(relay.url);
  (store as unknown as { debitConnection: unknown }).debitConnection = debitConnection;
  cleanUps.push(
    () => relay.close(),
    () => debitConnection.end({ timeout: 1 }),
  );

  const lookUp = () => context!.request(`/api/v1/products/${FRESH}/price`, { headers: { ...org.auth, "idempotency-key": "in-doubt-1" } });
  const first = await lookUp();
  expect(relay.commitsCut()).toBe(1);
  expect(first.status).toBe(503);
  expect(first.headers.get("retry-after")).toBe("1");
  const problem = await json<{ type: string; detail: string; meta: { requestId: string; billable: boolean } }>(first);
  expect(problem.type).toEndWith("/unavailable");
  expect(problem.detail).toContain("whether it was billed is not known");
  expect(problem.detail).not.toContain("not billed");
  const requestId = problem.meta.requestId;
  services.logger.flush();
  expect(logs.join("")).toContain(`"debit in doubt"`);
  expect(logs.join("")).toContain(requestId);

  // It did commit: the ledger has its usage row under the answer's request id, and nothing is held.
  expect(await queryRows(store, "SELECT request_id, amount::int AS amount FROM ledger_entries WHERE type = 'usage'")).toEqual([
    { request_id: requestId, amount: -1 },
  ]);
  expect(await ledgerSum(store, org.organizationId)).toBe(9);
  expect(await store.getBalance(org.organizationId, clock.now())).toMatchObject({ available: 9, reserved: 0 });

  // Once PostgreSQL answers again, the same Idempotency-Key replays the billed answer: no second debit.
  await Bun.sleep(2_600);
  const retried = await lookUp();
  expect(retried.status).toBe(200);
  expect(retried.headers.get("idempotent-replayed")).toBe("true");
  expect((await json<{ meta: { creditsConsumed: number; requestId: string } }>(retried)).meta).toMatchObject({ creditsConsumed: 1, requestId });
  expect(await ledgerSum(store, org.organizationId)).toBe(9);
  expect(await queryRows(store, "SELECT count(*)::int AS n FROM ledger_entries WHERE type = 'usage'")).toEqual([{ n: 1 }]);
});
