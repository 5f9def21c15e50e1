// What a credit lease's debit costs PostgreSQL, apart from HTTP and the service: the CPU of the
// database backends that run its statement and the settlements that write its look-ups' ledger rows
// (each instance's own, every 500 ms, on the same connection; what is left unsettled at the end of
// a block is settled inside it), per statement and per look-up in it, for batches of a given
// size, one or two instances (each with its own connection and lease rows) and one or many
// organizations. It splits the look-up benchmark's "PostgreSQL CPU per request" into what a batch
// costs whatever its size and what each look-up in it adds (the batch size there follows from the
// requests in flight).
//
//   bun bench/lease-debit.ts --postgres postgres://postgres@127.0.0.1:5432/test
//     [--rows 1,8,32] [--organizations 1,50] [--instances 1,2] [--batches 1000]
//
// Each setup gets a fresh schema; the bench writes its lease rows itself (large, lasting an hour), so
// only the debit and its settlement are measured, never a take or a give-back. With two instances
// both debit at once, as behind a load balancer: their settlements take turns on each
// organization's running sum.
import { parseArgs } from "node:util";
import postgres from "postgres";
import { openStore } from "../src/services";
import { createApiKey } from "../src/modules/keys/service";
import { CreditLeases, type Lease } from "../src/db/ledger/postgres-leases";
import type { Store } from "../src/db/store";
import { BILLED_REASON, SYSTEM_USER_ID } from "../src/db/store";
import { newId } from "../src/lib/ids";
import { cpuBetween, cpuOf } from "./process-cpu";

const { values } = parseArgs({
  options: {
    postgres: { type: "string" },
    rows: { type: "string", default: "1,8,32" },
    organizations: { type: "string", default: "1,50" },
    instances: { type: "string", default: "1,2" },
    batches: { type: "string", default: "1000" },
  },
});
if (values.postgres === undefined) {
  console.error("usage: bun bench/lease-debit.ts --postgres URL [--rows 1,8,32] [--organizations 1,50] [--instances 1,2] [--batches N]");
  process.exit(2);
}
const numbers = (text: string) => text.split(",").map(Number);
const batches = Number(values.batches);
const LEASE_CREDITS = 1_000_000_000;

interface Instance {
  sql: postgres.Sql;
  leases: CreditLeases;
  /** Per organization, in the order of `keys`. */
  held: Lease[];
  pid: number;
}

/** Organizations with credits and a key each, and per instance a connection and a lease row per organization. */
async function setUp(store: Store, url: string, organizations: number, instances: number) {
  const now = Date.now();
  await store.ensureSystemUser(now);
  const setup = postgres(url, { max: 1, onnotice: () => {} });
  const keys: Array<{ organizationId: string; keyId: string; bucketId: string }> = [];
  for (let index = 0; index < organizations; index++) {
    const organization = await store.createOrganization({ name: `Bench ${index}`, now });
    await store.grantCredits({
      organizationId: organization.id,
      source: "grant",
      type: "grant",
      amount: instances * LEASE_CREDITS,
      expiresAt: null,
      description: "Bench credits",
      now,
    });
    const created = await createApiKey(store, { organizationId: organization.id, name: "Bench", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });
    const [bucket] = await setup<[{ id: string }]>`SELECT id FROM credit_buckets WHERE organization_id = ${organization.id}`;
    keys.push({ organizationId: organization.id, keyId: created.key.id, bucketId: bucket.id });
  }
  const all: Instance[] = [];
  for (let index = 0; index < instances; index++) {
    const instanceId = `bench-${index}`;
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const held: Lease[] = [];
    for (const key of keys) held.push(await leaseRow(setup, key, instanceId, now));
    const [{ pid }] = await sql<[{ pid: number }]>`SELECT pg_backend_pid() AS pid`;
    const leases = new CreditLeases({ client: sql, instanceId, giveBack: async () => {}, changed: () => {}, reason: BILLED_REASON });
    all.push({ sql, leases, held, pid });
  }
  await setup.end();
  return { keys, instances: all };
}

/** A lease row taken out of the organization's bucket, as CreditLeases takes one. */
async function leaseRow(sql: postgres.Sql, key: { organizationId: string; bucketId: string }, instanceId: string, now: number): Promise<Lease> {
  const id = newId("res");
  const allocations = [{ bucketId: key.bucketId, amount: LEASE_CREDITS }];
  await sql`UPDATE credit_buckets SET remaining = remaining - ${LEASE_CREDITS} WHERE id = ${key.bucketId}`;
  await sql`INSERT INTO reservations (id, organization_id, amount, allocations, key_id, request_id, created_at, instance_id, expires_at)
    VALUES (${id}, ${key.organizationId}, ${LEASE_CREDITS}, ${JSON.stringify(allocations)}::text::jsonb, null, ${id}, ${now}, ${instanceId}, ${now + 3_600_000})`;
  return {
    id,
    organizationId: key.organizationId,
    amount: LEASE_CREDITS,
    allocations,
    held: 0,
    usableUntil: Number.POSITIVE_INFINITY,
    bucketsExpireAt: null,
    retired: false,
    lost: false,
  };
}

/** `count` debit statements of `rows` look-ups each, the organizations taken in turn. */
async function debitMany(instance: Instance, keys: Array<{ organizationId: string; keyId: string }>, rows: number, count: number, start: number) {
  for (let batch = 0; batch < count; batch++) {
    const debits = Array.from({ length: rows }, (_, row) => {
      const index = (start + batch * rows + row) % keys.length;
      const { organizationId, keyId } = keys[index]!;
      const ids = { reservationId: newId("res"), transactionId: newId("txn"), requestId: newId("req") };
      return {
        ...ids,
        organizationId,
        keyId,
        amount: 1,
        gtin: "04006381333931",
        description: "Price look-up",
        createdAt: Date.now(),
        items: 1,
        lease: instance.held[index]!,
      };
    });
    await instance.leases.debit(instance.sql, debits);
  }
}

const admin = postgres(values.postgres, { max: 1, onnotice: () => {} });
console.log(`lease debit and settlement: ${batches} statements per instance and batch size; CPU of the debiting backends`);
console.log("| instances | organizations | look-ups per statement | µs per statement | µs per look-up |");
console.log("|---|---|---|---|---|");
for (const instances of numbers(values.instances)) {
  for (const organizations of numbers(values.organizations)) {
    const schema = `bench_${process.pid}_debit_${instances}_${organizations}`;
    await admin.unsafe(`CREATE SCHEMA ${schema}`);
    const url = new URL(values.postgres);
    url.searchParams.set("search_path", schema);
    const store = await openStore(url.toString());
    try {
      const { keys, instances: all } = await setUp(store, url.toString(), organizations, instances);
      // Unmeasured: the statement's plan cached, the tables past their first pages.
      await Promise.all(all.map((instance, index) => debitMany(instance, keys, 4, 200, index)));
      await Promise.all(all.map((instance) => instance.leases.settle("all")));
      for (const rows of numbers(values.rows)) {
        const before = cpuOf(all.map((instance) => instance.pid));
        await Promise.all(all.map((instance, index) => debitMany(instance, keys, rows, batches, index)));
        await Promise.all(all.map((instance) => instance.leases.settle("all")));
        const used = cpuBetween(before, cpuOf(all.map((instance) => instance.pid)));
        const statements = batches * instances;
        console.log(`| ${instances} | ${organizations} | ${rows} | ${Math.round(used / statements)} | ${Math.round(used / statements / rows)} |`);
      }
      for (const instance of all) {
        instance.leases.stopSettling();
        await instance.sql.end();
      }
    } finally {
      await store.close();
      await admin.unsafe(`DROP SCHEMA ${schema} CASCADE`);
    }
  }
}
await admin.end();
