import { expect, test } from "bun:test";
import { openPostgresClient } from "../../src/db/postgres-client";
import { TEST_DATABASE_URL } from "../support/context";

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
