import { expect, test } from "bun:test";
import postgres from "postgres";
import { TEST_DATABASE_URL } from "../support/context";
import { createTestSchema, dropTestSchema, testApplicationName } from "../support/schemas";

// postgres.js as installed (patches/postgres+3.4.9.patch): a transaction's BEGIN reserves its
// connection only when the connection has room for more queries after it. BEGIN sent as the query
// that fills a connection's pipeline (or into a socket under backpressure) left the transaction open
// on a connection the pool kept handing out: `begin()` failed, and the next caller's writes ran inside
// that transaction, answered as done and never committed. `max_pipeline: 0` makes every BEGIN the
// query that fills its connection's pipeline; the service runs with the default of 100, where under
// load one BEGIN in a hundred pipelined queries is.
test("a transaction whose BEGIN fills its connection's pipeline still reserves the connection: its rows and the next caller's commit", async () => {
  const schema = await createTestSchema(TEST_DATABASE_URL!);
  // postgres.js reads max_pipeline but does not type it.
  const options = { max: 1, max_pipeline: 0, onnotice: () => {} };
  const pool = postgres(schema, options);
  const admin = postgres(schema, { max: 1, onnotice: () => {} });
  await admin`CREATE TABLE notes (note text)`;
  try {
    const outcome = await pool.begin(async (tx) => {
      await tx`INSERT INTO notes VALUES ('in the transaction')`;
      return "committed";
    });
    expect(outcome).toBe("committed");
    await pool`INSERT INTO notes VALUES ('the next caller')`;
    const rows = await admin<Array<{ note: string }>>`SELECT note FROM notes ORDER BY note`;
    expect(rows.map((row) => row.note)).toEqual(["in the transaction", "the next caller"]);
    const [{ open }] = await admin<[{ open: number }]>`
      SELECT count(*)::int AS open FROM pg_stat_activity WHERE application_name = ${testApplicationName(schema)} AND state = 'idle in transaction'`;
    expect(open).toBe(0);
  } finally {
    await pool.end({ timeout: 1 });
    await admin.end();
    await dropTestSchema(schema);
  }
});
