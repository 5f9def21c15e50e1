// What each store operation of a look-up costs on PostgreSQL, alone: the key read, the product read,
// the balance read, a reservation, a reservation then its release (a look-up that is not billed)
// and a reservation then its commit (a billed one, debits grouped as the service groups them).
// Per operation: PostgreSQL CPU (every `postgres` process of the machine, from /proc), the calling
// process's CPU and wall time, with `--concurrency` operations in flight (default 32, as wrk's
// connections in bench/lookup.ts). One organization with one bucket: the hot-organization case.
// The demo key has no monthly credit limit, so its reservation is a balance check with the credits
// held in memory, and its commit is the debit that takes them from the bucket.
//
// Usage: bun bench/postgres-ops.ts --postgres postgres://postgres@127.0.0.1:5432/test [--operations 5000] [--concurrency 32]
import { parseArgs } from "node:util";
import postgres from "postgres";
import { newId } from "../src/lib/ids";
import { hashSecret } from "../src/lib/crypto";
import { demoGTIN, seedDemo } from "../src/modules/ingest/demo-data";
import { openStore } from "../src/services";
import { cpuBetween, cpuOf, postgresPids } from "./process-cpu";

const { values } = parseArgs({
  options: { postgres: { type: "string" }, operations: { type: "string", default: "5000" }, concurrency: { type: "string", default: "32" } },
});
if (values.postgres === undefined) {
  console.error("usage: bun bench/postgres-ops.ts --postgres URL [--operations N] [--concurrency N]");
  process.exit(2);
}
const operations = Number(values.operations);
const concurrency = Number(values.concurrency);
const PRODUCTS = 2000;

const admin = postgres(values.postgres, { max: 1, onnotice: () => {} });
const schema = `bench_ops_${process.pid}`;
await admin.unsafe(`CREATE SCHEMA ${schema}`);
const url = new URL(values.postgres);
url.searchParams.set("search_path", schema);
const store = await openStore(url.toString());
try {
  const demo = await seedDemo(store, { products: PRODUCTS, credits: 1_000_000_000, keyPrefix: "pps_", now: Date.now(), freshnessWindowMs: 24 * 3_600_000 });
  const keyHash = hashSecret(demo.clearKey);
  const credential = (await store.findKeyCredential(keyHash))!;
  const gtins = Array.from({ length: PRODUCTS }, (_, index) => demoGTIN(index + 1).padStart(14, "0"));
  const reserve = () =>
    store.reserveCredits({ organizationId: credential.organizationId, amount: 1, keyId: credential.id, requestId: newId("req"), now: Date.now() });
  const held = async () => {
    const reservation = await reserve();
    if (!reservation.ok) throw new Error("the reservation was refused");
    return reservation.reservationId;
  };

  async function measure(name: string, operation: (index: number) => Promise<unknown>): Promise<void> {
    for (let index = 0; index < 200; index++) await operation(index);
    const postgresBefore = cpuOf(postgresPids());
    const ownBefore = process.cpuUsage();
    const startedAt = performance.now();
    for (let next = 0; next < operations; next += concurrency) {
      await Promise.all(Array.from({ length: Math.min(concurrency, operations - next) }, (_, offset) => operation(next + offset)));
    }
    const wallUs = ((performance.now() - startedAt) * 1000) / operations;
    const own = process.cpuUsage(ownBefore);
    const postgresUs = cpuBetween(postgresBefore, cpuOf(postgresPids())) / operations;
    console.log(
      `${name.padEnd(22)} PostgreSQL ${postgresUs.toFixed(0).padStart(5)} µs  service ${((own.user + own.system) / operations).toFixed(0).padStart(4)} µs  wall ${wallUs.toFixed(0).padStart(5)} µs`,
    );
  }

  console.log(`PostgreSQL cost per store operation: ${operations} operations, ${concurrency} in flight, one organization`);
  await measure("key read", () => store.findKeyCredential(keyHash));
  await measure("product read", (index) => store.findProductWithOffers(gtins[index % PRODUCTS]!));
  await measure("balance read", () => store.availableCredits(credential.organizationId, Date.now()));
  await measure("reserve", reserve);
  await measure("reserve + release", async () => store.releaseReservation(await held(), Date.now()));
  await measure("reserve + commit", async (index) =>
    store.commitReservation(await held(), { gtin: gtins[index % PRODUCTS]!, description: "Price look-up", now: Date.now() }),
  );
} finally {
  await store.close();
  await admin.unsafe(`DROP SCHEMA ${schema} CASCADE`);
  await admin.end();
}
