import { afterEach, beforeEach, expect, test } from "bun:test";
import type { PostgresStore } from "../../src/db/postgres-store";
import { openStore } from "../../src/services";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";
import { hashSecret } from "../../src/lib/crypto";
import { openDebitConnection } from "../../src/db/postgres-client";
import { createTestDatabase, ledgerSum, queryRows, type TestDatabase } from "../support/context";
import { testApplicationName } from "../support/schemas";
import { startCommitAnswerLoss, startRelay } from "../support/postgres-relay";

// An uncapped key's look-up holds its credits in the instance's memory and its debit takes them
// from the buckets (PostgresStore.reserveCredits). The windows between its steps: a debit whose
// statement committed although the connection failed before the instance heard so, and a key that
// gained a monthly credit limit between its look-up's balance check and its debit.
let database: TestDatabase;
let store: PostgresStore;

beforeEach(async () => {
  database = await createTestDatabase();
  store = (await openStore(database.url)) as PostgresStore;
});

afterEach(async () => {
  await store.close();
  await database.drop();
});

/** An organization with 10 credits, 3 of them held in this instance's memory by a look-up. */
async function holdThreeOfTen(name: string, requestId: string, now: number) {
  const organization = await store.createOrganization({ name, now });
  await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 10, expiresAt: null, description: "Credits", now });
  const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 3, keyId: null, requestId, now });
  if (!reservation.ok) throw new Error("reservation refused");
  return { organization, reservation };
}

test("a debit retried after its statement committed is found written: one usage row, credits taken once", async () => {
  const organization = await store.createOrganization({ name: "retried", now: Date.now() });
  await store.grantCredits({
    organizationId: organization.id,
    source: "grant",
    type: "grant",
    amount: 10,
    expiresAt: null,
    description: "Credits",
    now: Date.now(),
  });
  const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 3, keyId: null, requestId: "req_retried", now: Date.now() });
  if (!reservation.ok) throw new Error("reservation refused");

  // The statement the group commit ran, then the lone retry its caller's error would start.
  const held = { organizationId: organization.id, amount: 3, keyId: null, requestId: "req_retried", committing: true };
  const pending = {
    reservationId: reservation.reservationId,
    usage: { gtin: null, description: "look-up", now: Date.now() },
    held,
    transactionId: "txn_retried",
    resolve: () => {},
    reject: () => {},
  };
  const debit = (retried: boolean) =>
    (
      store as unknown as { reservations: { debitBatch(items: unknown[], options: { retried: boolean }): Promise<Map<string, { outcome: string }>> } }
    ).reservations.debitBatch([pending], { retried });
  expect((await debit(false)).get(reservation.reservationId)?.outcome).toBe("committed");
  expect((await debit(true)).get(reservation.reservationId)?.outcome).toBe("committed");

  expect(await queryRows(store, "SELECT id FROM ledger_entries WHERE type = 'usage'")).toEqual([{ id: "txn_retried" }]);
  expect(await ledgerSum(store, organization.id)).toBe(7);
  const [bucket] = await queryRows<{ remaining: number }>(store, "SELECT remaining::int AS remaining FROM credit_buckets");
  expect(bucket!.remaining).toBe(7);
});

test("a key capped between its look-up's balance check and its debit is not billed there: the hold goes back, the retry takes the capped path", async () => {
  const now = Date.now();
  const organization = await store.createOrganization({ name: "capped meanwhile", now });
  await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 10, expiresAt: null, description: "Credits", now });
  await store.ensureSystemUser(now);
  const { key } = await createApiKey(store, { organizationId: organization.id, name: "soon capped", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });
  const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 2, keyId: key.id, requestId: "req_1", now });
  if (!reservation.ok) throw new Error("reservation refused");
  expect(await store.getBalance(organization.id, now)).toMatchObject({ available: 8, reserved: 2 });

  await store.updateApiKeyControls(organization.id, key.id, { monthlyCreditLimit: 1 });
  expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(false);
  expect(await store.releaseReservation(reservation.reservationId, now)).toBe(true);
  expect(await queryRows(store, "SELECT id FROM ledger_entries WHERE type = 'usage'")).toEqual([]);
  expect(await store.getBalance(organization.id, now)).toMatchObject({ available: 10, reserved: 0 });
  // Now past the limit it is refused by the limit, as any capped key's request.
  expect(await store.reserveCredits({ organizationId: organization.id, amount: 2, keyId: key.id, requestId: "req_2", now })).toMatchObject({
    ok: false,
    keyLimit: 1,
  });
});

test("a key read brings its own organization's spendable credits at the request's clock, which the look-up's reservation takes instead of reading them again", async () => {
  const now = Date.now();
  const own = await store.createOrganization({ name: "own", now });
  const other = await store.createOrganization({ name: "other", now });
  await store.grantCredits({ organizationId: own.id, source: "grant", type: "grant", amount: 10, expiresAt: null, description: "Credits", now });
  await store.grantCredits({ organizationId: own.id, source: "grant", type: "grant", amount: 5, expiresAt: now + 1_000, description: "Short", now });
  await store.grantCredits({ organizationId: other.id, source: "grant", type: "grant", amount: 100, expiresAt: null, description: "Not ours", now });
  await store.ensureSystemUser(now);
  const { key, clearKey } = await createApiKey(store, { organizationId: own.id, name: "reader", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });

  expect((await store.findKeyCredential(hashSecret(clearKey), now))?.balance).toEqual({ spendable: 15, capped: false });
  expect((await store.findKeyCredential(hashSecret(clearKey), now + 1_000))?.balance).toEqual({ spendable: 10, capped: false });
  // The reservation goes by the balance it is given: 15 credits are in the buckets, 10 were read with the key.
  expect(
    await store.reserveCredits({ organizationId: own.id, amount: 12, keyId: key.id, requestId: "req_1", now, balance: { spendable: 10, capped: false } }),
  ).toEqual({ ok: false, available: 10 });

  await store.updateApiKeyControls(own.id, key.id, { monthlyCreditLimit: 50 });
  expect((await store.findKeyCredential(hashSecret(clearKey), now))?.balance).toEqual({ spendable: 15, capped: true });
});

test("the credits available to a problem answered right after the key read are the key read's balance less this instance's holds, not a second read", async () => {
  const now = Date.now();
  const organization = await store.createOrganization({ name: "problems", now });
  await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 15, expiresAt: null, description: "Credits", now });
  const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 3, keyId: null, requestId: "req_held", now });
  expect(reservation.ok).toBe(true);

  expect(await store.availableCredits(organization.id, now)).toBe(12);
  // 15 credits are in the buckets; 10 were read with the key: the answer goes by the key read.
  expect(await store.availableCredits(organization.id, now, { spendable: 10, capped: false })).toBe(7);
  expect(await store.availableCredits(organization.id, now, { spendable: 2, capped: false })).toBe(0);
});

test("a debit that meets another transaction's bucket lock waits in its lock statement, then debits from the bucket as that transaction left it", async () => {
  const now = Date.now();
  const { organization, reservation } = await holdThreeOfTen("locked meanwhile", "req_waits", now);

  // Another instance's transaction holds the bucket and takes 4 credits from it.
  const other = await store.connection.reserve();
  try {
    await other`BEGIN`;
    await other`UPDATE credit_buckets SET remaining = remaining - 4 WHERE organization_id = ${organization.id}`;
    await other`UPDATE organizations SET ledger_balance = ledger_balance - 4 WHERE id = ${organization.id}`;
    await other`INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, description, created_at) VALUES ('txn_other', ${organization.id}, 'adjustment', -4, 6, 'other instance', ${now})`;
    const committed = store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now });

    let waiting: Array<{ query: string }> = [];
    for (let attempt = 0; attempt < 100 && waiting.length === 0; attempt++) {
      await Bun.sleep(20);
      waiting = await queryRows<{ query: string }>(store, "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()");
    }
    expect(waiting).toHaveLength(1);
    expect(waiting[0]!.query.trim()).toStartWith("SELECT id, organization_id, remaining FROM credit_buckets");

    await other`COMMIT`;
    expect(await committed).toBe(true);
  } finally {
    await other`ROLLBACK`; // only when an expectation failed before the COMMIT: the debit must not wait forever
    other.release();
  }
  const [usage] = await queryRows<{ amount: number; balance_after: number }>(
    store,
    "SELECT amount::int AS amount, balance_after::int AS balance_after FROM ledger_entries WHERE type = 'usage'",
  );
  expect(usage).toEqual({ amount: -3, balance_after: 3 });
  expect(await ledgerSum(store, organization.id)).toBe(3);
  const [bucket] = await queryRows<{ remaining: number }>(store, "SELECT remaining::int AS remaining FROM credit_buckets");
  expect(bucket!.remaining).toBe(3);
});

test("the group commit's connection runs its debit statements on generic plans, never planning a batch again", async () => {
  const now = Date.now();
  const organization = await store.createOrganization({ name: "plans", now });
  await store.grantCredits({
    organizationId: organization.id,
    source: "grant",
    type: "grant",
    amount: 100,
    expiresAt: now + 60_000,
    description: "Credits",
    now,
  });
  // One debit at a time, each its own batch: PostgreSQL plans a prepared statement's first five executions for their parameters unless told not to.
  for (let request = 0; request < 8; request++) {
    const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 1, keyId: null, requestId: `req_${request}`, now });
    if (!reservation.ok) throw new Error("reservation refused");
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
  }

  const debitConnection = (store as unknown as { debitConnection: typeof store.connection }).debitConnection;
  const plans = await debitConnection<Array<{ statement: string; generic_plans: string; custom_plans: string }>>`
    SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%credit_buckets%'`;
  const debit = plans.find((plan) => plan.statement.includes("UPDATE credit_buckets"));
  expect(debit).toBeDefined();
  expect(plans.map((plan) => Number(plan.custom_plans))).toEqual(plans.map(() => 0));
  expect(Number(debit!.generic_plans)).toBe(8);
  expect(await ledgerSum(store, organization.id)).toBe(92);
});

test("a batch of held look-ups writes what the general debit statement writes: buckets, sums, ledger rows, counters, spending, balance events", async () => {
  const now = Date.now();
  type Debit = {
    debitBatch(items: unknown[], options: { retried: boolean }): Promise<Map<string, { outcome: string; available?: number; spendable?: number }>>;
  };
  // The same organization twice: one debited by the two-step path of held look-ups, one by the general statement (a retry takes it).
  async function debitOneOrganization(name: string, retried: boolean) {
    const organization = await store.createOrganization({ name, now });
    await store.setLowCreditThreshold(organization.id, 5);
    await store.createWebhookEndpoint({
      id: `whe_${name}`,
      organizationId: organization.id,
      url: "https://hooks.example/credits",
      eventTypes: ["credits.low", "credits.depleted"],
      secret: "whsec_AAAA",
      createdAt: now,
    });
    for (const [amount, expiresAt] of [
      [3, null],
      [4, now + 120_000],
      [5, now + 60_000],
    ] as const) {
      await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount, expiresAt, description: "Credits", now });
    }
    await store.ensureSystemUser(now);
    const uncapped = (await createApiKey(store, { organizationId: organization.id, name: "uncapped", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now })).key;
    // Capped after its look-ups' credits were held: those get no outcome here (their retry takes the capped path).
    const capped = (
      await createApiKey(store, { organizationId: organization.id, name: "capped", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now, monthlyCreditLimit: 100 })
    ).key;
    const batch = (looks: Array<[amount: number, keyId: string | null, items: number]>, first: number) =>
      looks.map(([amount, keyId, items], index) => ({
        reservationId: `res_${first + index}`,
        usage: { gtin: `0400000000${first + index}`, description: `look-up ${first + index}`, now: now + first + index, items },
        held: { organizationId: organization.id, amount, keyId, requestId: `req_${name}_${first + index}`, committing: true },
        transactionId: `txn_${name}_${first + index}`,
        resolve: () => {},
        reject: () => {},
      }));
    const debit = (items: unknown[]) => (store as unknown as { reservations: Debit }).reservations.debitBatch(items, { retried });
    // 12 credits: 2, 4, 3 and 2 are taken (the 1 of the capped key is not), then 5 does not fit and neither does the 1 after it.
    const first = await debit(
      batch(
        [
          [2, uncapped.id, 1],
          [4, uncapped.id, 1],
          [1, capped.id, 1],
          [3, null, 1],
          [2, uncapped.id, 7],
          [5, uncapped.id, 1],
          [1, uncapped.id, 1],
        ],
        0,
      ),
    );
    const second = await debit(batch([[1, uncapped.id, 1]], 10));
    const third = await debit(batch([[1, uncapped.id, 1]], 20));
    const outcomes = [...first, ...second, ...third].sort(([a], [b]) => (a < b ? -1 : 1));
    const rows = async (query: string) =>
      (await queryRows<Record<string, unknown>>(store, query.replaceAll("$org", `'${organization.id}'`))).map((row) =>
        JSON.parse(JSON.stringify(row).replaceAll(organization.id, "org").replaceAll(uncapped.id, "uncapped").replaceAll(`_${name}_`, "_")),
      );
    const buckets = await rows("SELECT id, remaining::int FROM credit_buckets WHERE organization_id = $org ORDER BY expires_at NULLS LAST");
    const bucketNames = new Map(buckets.map((bucket, index) => [bucket.id as string, `bucket ${index}`]));
    return {
      outcomes,
      buckets: buckets.map((bucket) => bucket.remaining),
      sum: await ledgerSum(store, organization.id),
      ledger: (
        await rows(
          `SELECT id, amount::int, balance_after::int, bucket_id, key_id, request_id, gtin, description, created_at::bigint - ${now} AS at FROM ledger_entries WHERE organization_id = $org AND type = 'usage' ORDER BY id`,
        )
      ).map((row) => ({ ...row, bucket_id: row.bucket_id === null ? null : bucketNames.get(row.bucket_id as string) })),
      counters: await rows(
        "SELECT period_ms, period_start::bigint, key_id, reason, requests, credits::int FROM usage_counters WHERE organization_id = $org ORDER BY period_ms, key_id",
      ),
      spending: await rows(
        `SELECT key_id, month, spent::int FROM api_key_monthly_usage WHERE key_id IN (SELECT id FROM api_keys WHERE organization_id = $org) ORDER BY key_id`,
      ),
      events: await rows(
        "SELECT type, payload FROM webhook_events WHERE organization_id = $org AND type LIKE 'credits.%' AND type <> 'credits.granted' ORDER BY created_at, type",
      ),
      deliveries: (
        await rows(
          "SELECT count(*)::int AS n FROM webhook_deliveries JOIN webhook_events ON webhook_events.id = webhook_deliveries.event_id WHERE webhook_events.organization_id = $org AND webhook_events.type <> 'credits.granted'",
        )
      )[0],
    };
  }

  const twoSteps = await debitOneOrganization("held", false);
  const general = await debitOneOrganization("general", true);
  expect(twoSteps).toEqual(general);
  // And what both wrote is what it should be; a committed hold says what its organization's buckets hold after its batch.
  expect(twoSteps.outcomes).toEqual([
    ["res_0", { outcome: "committed", spendable: 1 }],
    ["res_1", { outcome: "committed", spendable: 1 }],
    ["res_10", { outcome: "committed", spendable: 0 }],
    ["res_20", { outcome: "spent", available: 0 }],
    ["res_3", { outcome: "committed", spendable: 1 }],
    ["res_4", { outcome: "committed", spendable: 1 }],
    ["res_5", { outcome: "spent", available: 1 }],
    ["res_6", { outcome: "spent", available: 1 }],
  ]);
  expect(twoSteps.buckets).toEqual([0, 0, 0]);
  expect(twoSteps.sum).toBe(0);
  expect(twoSteps.ledger.map((row) => [row.amount, row.balance_after, row.bucket_id])).toEqual([
    [-2, 10, "bucket 0"],
    [-4, 6, null],
    [-1, 0, "bucket 2"],
    [-3, 3, "bucket 1"],
    [-2, 1, "bucket 2"],
  ]);
  expect(twoSteps.events.map((event) => event.type)).toEqual(["credits.low", "credits.depleted"]);
  expect(twoSteps.deliveries).toEqual({ n: 2 });
  expect(twoSteps.spending).toEqual([{ key_id: "uncapped", month: expect.any(String), spent: 9 }]);
});

test("an instance that freezes while its debit holds bucket locks loses that transaction, and other debits of the organization go on", async () => {
  const now = Date.now();
  const organization = await store.createOrganization({ name: "frozen neighbour", now });
  await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: 10, expiresAt: null, description: "Credits", now });
  const frozen = openDebitConnection(database.url, { frozenAfter: "300ms" });
  try {
    // The first step of a debit, and then nothing: the instance stopped before computing the rest.
    await frozen`BEGIN`;
    await frozen`SELECT id FROM credit_buckets WHERE organization_id = ${organization.id} FOR UPDATE`;

    const reservation = await store.reserveCredits({ organizationId: organization.id, amount: 3, keyId: null, requestId: "req_neighbour", now });
    if (!reservation.ok) throw new Error("reservation refused");
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
    expect(await ledgerSum(store, organization.id)).toBe(7);
  } finally {
    await frozen.end();
  }
});

test("a debit whose connection dies after it locked and read its rows writes nothing on the new connection; its retry debits from the rows as they are then", async () => {
  const now = Date.now();
  const { organization, reservation } = await holdThreeOfTen("connection lost", "req_lost", now);

  // Once the debit has locked and read its rows, its backend is terminated, and another
  // instance takes 4 credits before the debit's next statement goes out (on a new connection).
  const debitConnection = (store as unknown as { debitConnection: typeof store.connection }).debitConnection;
  const other = store.connection;
  let killed = false;
  (store as unknown as { debitConnection: unknown }).debitConnection = new Proxy(debitConnection, {
    apply(target, self, args: Parameters<typeof debitConnection>) {
      const query = Reflect.apply(target, self, args);
      // The first step's last statement: once it has answered, the transaction waits for the second
      // step. A thenable, so that it is sent in its turn, after the statements before it.
      if (killed || !String((args[0] as unknown as string[])[0]).includes("pg_current_xact_id")) return query;
      killed = true;
      const lost = async (rows: unknown) => {
        let debit: { pid: number } | undefined;
        while (debit === undefined) {
          [debit] = await other<
            [{ pid: number }?]
          >`SELECT pid FROM pg_stat_activity WHERE application_name = ${testApplicationName(database.url)} AND state = 'idle in transaction'`;
        }
        await other`SELECT pg_terminate_backend(${debit.pid})`;
        while ((await other`SELECT 1 FROM pg_stat_activity WHERE pid = ${debit.pid}`).length > 0) await Bun.sleep(5);
        // Until postgres.js has a new connection, which the debit's next statement will then use.
        while (
          !(await target`SELECT 1`.then(
            () => true,
            () => false,
          ))
        );
        await other.begin(async (tx) => {
          await tx`UPDATE credit_buckets SET remaining = remaining - 4 WHERE organization_id = ${organization.id}`;
          await tx`UPDATE organizations SET ledger_balance = ledger_balance - 4 WHERE id = ${organization.id}`;
          await tx`INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, description, created_at) VALUES ('txn_other', ${organization.id}, 'adjustment', -4, 6, 'other instance', ${now})`;
        });
        return rows;
      };
      return { then: (resolve: (rows: unknown) => unknown, reject: (error: unknown) => unknown) => query.then(lost).then(resolve, reject) };
    },
  });

  expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
  expect(killed).toBe(true);
  expect(await queryRows(store, "SELECT amount::int AS amount, balance_after::int AS balance_after FROM ledger_entries WHERE type = 'usage'")).toEqual([
    { amount: -3, balance_after: 3 },
  ]);
  expect(await ledgerSum(store, organization.id)).toBe(3);
  expect(await queryRows(store, "SELECT remaining::int AS remaining FROM credit_buckets")).toEqual([{ remaining: 3 }]);
});

test("a debit connection that dies while postgres.js fetches its array types debits with array parameters on the next one", async () => {
  const now = Date.now();
  const { organization, reservation } = await holdThreeOfTen("types lost", "req_types", now);

  // A new debit connection, reached through a relay that lets PostgreSQL end the connection's backend
  // when postgres.js asks for the array types, the first thing it does on a connection. Unpatched,
  // the pool then sends arrays as text ("malformed array literal") until the instance restarts.
  let typeFetchesEnded = 0;
  const relay = await startRelay(database.url, {
    fromClient(data, { server }) {
      if (typeFetchesEnded > 0 || !data.toString("latin1").includes("pg_catalog.pg_type")) return true;
      typeFetchesEnded++;
      store.connection`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE client_port = ${server.localPort!}`.execute();
      return false;
    },
  });
  const debitConnection = openDebitConnection(relay.url);
  (store as unknown as { debitConnection: unknown }).debitConnection = debitConnection;
  try {
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
    expect(typeFetchesEnded).toBe(1);
    const second = await store.reserveCredits({ organizationId: organization.id, amount: 2, keyId: null, requestId: "req_types_2", now });
    if (!second.ok) throw new Error("reservation refused");
    expect(await store.commitReservation(second.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
    expect([...(await debitConnection`SELECT ${["a", "b"]}::text[] AS sent`)]).toEqual([{ sent: ["a", "b"] }]);
    expect(
      await queryRows(
        store,
        "SELECT amount::int AS amount, balance_after::int AS balance_after FROM ledger_entries WHERE type = 'usage' ORDER BY balance_after DESC",
      ),
    ).toEqual([
      { amount: -3, balance_after: 7 },
      { amount: -2, balance_after: 5 },
    ]);
    expect(await ledgerSum(store, organization.id)).toBe(5);
  } finally {
    await debitConnection.end({ timeout: 1 });
    relay.close();
  }
});

test("a debit that committed unseen while PostgreSQL stays away for seconds is found written once it is back, and its look-up answered as billed", async () => {
  const now = Date.now();
  const { organization, reservation } = await holdThreeOfTen("away", "req_away", now);

  // PostgreSQL takes the debit's COMMIT, its answer is lost, and it refuses connections for 2.5 s
  // (longer than the old retries lasted).
  const relay = await startCommitAnswerLoss(database.url, 2_500);
  const debitConnection = openDebitConnection(relay.url);
  (store as unknown as { debitConnection: unknown }).debitConnection = debitConnection;
  try {
    const started = performance.now();
    expect(await store.commitReservation(reservation.reservationId, { gtin: null, description: "look-up", now })).toBe(true);
    expect(relay.commitsCut()).toBe(1);
    expect(performance.now() - started).toBeGreaterThan(2_500);
    expect(
      await queryRows(store, "SELECT request_id, amount::int AS amount, balance_after::int AS balance_after FROM ledger_entries WHERE type = 'usage'"),
    ).toEqual([{ request_id: "req_away", amount: -3, balance_after: 7 }]);
    expect(await ledgerSum(store, organization.id)).toBe(7);
    expect(await queryRows(store, "SELECT remaining::int AS remaining FROM credit_buckets")).toEqual([{ remaining: 7 }]);
  } finally {
    await debitConnection.end({ timeout: 1 });
    relay.close();
  }
});

test("a batch whose latest look-up comes after a bucket's expiry takes nothing from that bucket, whatever its earlier look-ups' clocks", async () => {
  const now = Date.now();
  const expiresAt = now + 1_000;
  const organization = await store.createOrganization({ name: "expiring", now });
  const credits = { organizationId: organization.id, source: "grant" as const, type: "grant" as const, description: "Credits", now };
  await store.grantCredits({ ...credits, amount: 5, expiresAt });
  await store.grantCredits({ ...credits, amount: 5, expiresAt: null });
  const ids: string[] = [];
  for (const [requestId, amount] of [
    ["req_first", 1],
    ["req_before", 2],
    ["req_after", 2],
  ] as const) {
    const reservation = await store.reserveCredits({ organizationId: organization.id, amount, keyId: null, requestId, now });
    if (!reservation.ok) throw new Error("reservation refused");
    ids.push(reservation.reservationId);
  }
  // The first commit's batch is being written when the other two arrive: they make the next batch,
  // one look-up answered before the expiry, the other at it.
  const committed = await Promise.all([
    store.commitReservation(ids[0]!, { gtin: null, description: "look-up", now }),
    store.commitReservation(ids[1]!, { gtin: null, description: "look-up", now: expiresAt - 1 }),
    store.commitReservation(ids[2]!, { gtin: null, description: "look-up", now: expiresAt }),
  ]);
  expect(committed).toEqual([true, true, true]);
  const buckets = await queryRows<{ remaining: string }>(
    store,
    "SELECT remaining FROM credit_buckets WHERE organization_id = ? ORDER BY expires_at NULLS LAST",
    [organization.id],
  );
  expect(buckets.map((bucket) => Number(bucket.remaining))).toEqual([4, 1]);
});
