import { expect, test } from "bun:test";
import { openPostgresClient } from "../../src/db/postgres-client";
import { TEST_DATABASE_URL } from "../support/context";
import { createTestSchema, dropTestSchema } from "../support/schemas";

// postgres.js as installed (patches/postgres+3.4.9.patch): a connection whose backend PostgreSQL
// ended during a query kept that error and failed the first query of its next connection with it.
test("after PostgreSQL ends a connection's backend mid-query, the pool's next query on a new connection succeeds", async () => {
  const pool = openPostgresClient(TEST_DATABASE_URL!, { max: 1 });
  const admin = openPostgresClient(TEST_DATABASE_URL!, { max: 1 });
  try {
    const [{ pid }] = await pool<[{ pid: number }]>`SELECT pg_backend_pid() AS pid`;
    const sleeping = pool`SELECT pg_sleep(10)`.then(
      () => null,
      (error: { code?: string }) => error.code,
    );
    while ((await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${pid} AND state = 'active'`).length === 0) await Bun.sleep(5);
    await admin`SELECT pg_terminate_backend(${pid})`;
    expect(await sleeping).toMatch(/^(57P01|CONNECTION_CLOSED)$/);
    const [{ answer, backend }] = await pool<[{ answer: number; backend: number }]>`SELECT 42 AS answer, pg_backend_pid() AS backend`;
    expect(answer).toBe(42);
    expect(backend).not.toBe(pid);
  } finally {
    await pool.end();
    await admin.end();
  }
});

// A transaction whose backend PostgreSQL ended: what its body sends afterwards (after catching the
// error, or its ROLLBACK) went out on the pool's reconnected connection, outside any transaction,
// and a ROLLBACK left queued on the dead connection kept `end()` waiting for its whole time-out.
test("a transaction whose connection was lost sends nothing more: a write after the loss is refused, never committed on the next connection", async () => {
  const schema = await createTestSchema(TEST_DATABASE_URL!);
  const pool = openPostgresClient(schema, { max: 1 });
  const admin = openPostgresClient(schema, { max: 1 });
  await admin`CREATE TABLE notes (note text)`;
  const codeOf = (error: { code?: string }) => error.code;
  try {
    let lostPid = 0;
    let body!: Promise<string | undefined>;
    const transaction = pool.begin((tx) => {
      body = (async () => {
        await tx`INSERT INTO notes VALUES ('before the loss')`;
        [{ pid: lostPid }] = await tx<[{ pid: number }]>`SELECT pg_backend_pid() AS pid`;
        await tx`SELECT pg_sleep(10)`.catch(codeOf);
        // The pool connects again for another caller before the body goes on.
        await pool`SELECT 1`;
        return tx`INSERT INTO notes VALUES ('after the loss')`.then(() => "written", codeOf);
      })();
      return body;
    });
    while (lostPid === 0 || (await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${lostPid} AND wait_event = 'PgSleep'`).length === 0) await Bun.sleep(5);
    await admin`SELECT pg_terminate_backend(${lostPid})`;
    expect(await transaction.then(() => "committed", codeOf)).toBe("CONNECTION_CLOSED");
    expect(await body).toBe("CONNECTION_CLOSED");
    expect([...(await admin`SELECT note FROM notes`)]).toEqual([]);
    // Nothing of the lost transaction is left queued: the pool ends without a time-out.
    await pool.end();
  } finally {
    await pool.end({ timeout: 0 });
    await admin.end();
    await dropTestSchema(schema);
  }
});
