// The simulation's faults as operations: an instance crashes, a write inside the money transactions
// fails, PostgreSQL ends connections (or stays away a while, or ends a settlement of lease usage
// midway), another connection holds the SQLite write lock, a second `serve` tries to start on the SQLite file.
import { openDebitConnection } from "../../src/db/postgres-client";
import { PostgresStore } from "../../src/db/postgres-store";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { lockDatabaseForServing } from "../../src/db/sqlite-serve-lock";
import type { Store } from "../../src/db/store";
import { queryRows } from "../support/context";
import { testApplicationName } from "../support/schemas";
import { startCommitAnswerLoss } from "../support/postgres-relay";
import { FRESH, MISSING, STALE, STALLING, type LookUpShape } from "./model";
import { paidPurchases, refundNow, type Operation } from "./operations";
import type { World } from "./world";

/** Once the relay has lost a COMMIT's answer (and before `answered`), a live instance settles the organization's lease usage. */
async function settleOnceCut(world: World, relay: { commitsCut(): number }, answered: Promise<unknown>, organizationId: string): Promise<void> {
  let done = false;
  void answered.finally(() => (done = true));
  while (relay.commitsCut() === 0 && !done) await Bun.sleep(2);
  // The relay counts the statement when it passes it on: give PostgreSQL the time to commit it.
  await Bun.sleep(50);
  if (done) return;
  const settler = world.pick(world.alive());
  const count = await (settler.inner as PostgresStore).leases.settle({ organizations: [organizationId] });
  world.trace.push(`  ${settler.name} settled ${count} leased look-up(s) while the answer was lost`);
}

/** A trigger that makes ledger inserts fail while the sim_faults row says so. */
export async function installWriteFault(store: Store): Promise<void> {
  if (store instanceof SQLiteStore) {
    store.connection.exec("CREATE TABLE sim_faults (fail INTEGER NOT NULL)");
    store.connection.exec("INSERT INTO sim_faults VALUES (0)");
    store.connection.exec(
      "CREATE TRIGGER sim_fail_ledger BEFORE INSERT ON credit_transactions WHEN (SELECT fail FROM sim_faults) > 0 BEGIN SELECT RAISE(ABORT, 'injected write failure'); END",
    );
    return;
  }
  const sql = (store as PostgresStore).connection;
  await sql.unsafe("CREATE TABLE sim_faults (fail INTEGER NOT NULL)");
  await sql.unsafe("INSERT INTO sim_faults VALUES (0)");
  await sql.unsafe(
    "CREATE FUNCTION sim_fail_ledger() RETURNS trigger AS $$ BEGIN IF (SELECT fail FROM sim_faults) > 0 THEN RAISE EXCEPTION 'injected write failure'; END IF; RETURN NEW; END $$ LANGUAGE plpgsql",
  );
  await sql.unsafe("CREATE TRIGGER sim_fail_ledger BEFORE INSERT ON credit_transactions FOR EACH ROW EXECUTE FUNCTION sim_fail_ledger()");
}

export async function setWriteFault(observer: Store, on: boolean): Promise<void> {
  await execute(observer, `UPDATE sim_faults SET fail = ${on ? 1 : 0}`);
}

/** A statement of the harness itself; on SQLite it waits out a lock another connection holds, as the stores do. */
async function execute(store: Store, text: string): Promise<void> {
  if (!(store instanceof SQLiteStore)) return void (await (store as PostgresStore).connection.unsafe(text));
  for (;;) {
    try {
      return void store.connection.exec(text);
    } catch (error) {
      if ((error as { code?: string }).code !== "SQLITE_BUSY") throw error;
      await Bun.sleep(5);
    }
  }
}

export function faultOperations(world: World): Operation[] {
  const { faults, observer } = world;
  /** A look-up of FRESH by one of the organization's active keys (half of them capped). */
  const freshLookUp = (instance = world.pick(world.alive())) => {
    const organization = world.pick(world.organizations);
    const key = world.pick(world.activeKeys(organization));
    const shape: LookUpShape = world.chance(0.3)
      ? { kind: "batch", organizationId: organization.id, gtins: [FRESH, "05012345678900"] }
      : { kind: "single", organizationId: organization.id, gtins: [FRESH] };
    let idempotencyKey: string | null = null;
    if (world.chance(0.3)) {
      idempotencyKey = `sim-${world.seed}-${++world.sequence}`;
      world.idempotencyKeys.set(idempotencyKey, shape);
    }
    return world.sendLookUp(instance, shape, key, idempotencyKey);
  };

  return [
    [
      faults.crash ? 2 : 0,
      "crash",
      async () => {
        const victim = world.pick(world.alive());
        world.kill(victim);
        world.injected("crash");
        const replacement = await world.startInstance(`${victim.name}'`, victim.clock.now());
        world.trace.push(`  ${victim.name} crashed; ${replacement.name} started`);
      },
    ],
    [
      faults.failedWrite ? 3 : 0,
      "failed write",
      async () => {
        world.injected("failed write");
        await setWriteFault(observer, true);
        const request = freshLookUp();
        world.trace.push(`  look-up #${request.id} while writes fail`);
        // The watch evaluator's debits fail too: its run rolls back whole and the changes stay queued.
        if (world.chance(0.3)) {
          const evaluated = await world
            .pick(world.alive())
            .services.watches.tick()
            .then(
              () => "ran",
              (error: unknown) => `failed (${error})`,
            );
          world.trace.push(`  watch evaluation while writes fail: ${evaluated}`);
        }
        await request.settled;
        await setWriteFault(observer, false);
      },
    ],
    [
      faults.connectionLost ? 4 : 0,
      "connection lost",
      async () => {
        world.injected("connection lost");
        const instance = world.pick(world.alive());
        const sent = [1, 2, 3].map(() => freshLookUp(instance));
        world.trace.push(`  look-ups #${sent.map((request) => request.id).join(", #")} while connections are ended`);
        // Only this run's backends (its schema's application_name): other runs share the server.
        const ours = testApplicationName(world.database.url);
        // Whatever transactions of the instances are in flight at that moment (a debit between its two
        // steps, with luck; a new connection fetching postgres.js's array types, at times).
        for (let attempt = 0; attempt < 20; attempt++) {
          const [ended] = await queryRows<{ count: number }>(
            observer,
            "SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid() AND xact_start IS NOT NULL AND state <> 'idle'",
            [ours],
          );
          if (ended!.count > 0) {
            world.trace.push(`  ${ended!.count} connection(s) ended`);
            break;
          }
        }
        // At times PostgreSQL then stays away for a while (a restart): every connection the
        // instances open again is ended too, so debits in doubt wait for it to come back.
        if (world.chance(0.4)) {
          let ended = 0;
          for (const until = performance.now() + 1_500; performance.now() < until; await Bun.sleep(5)) {
            const [count] = await queryRows<{ count: number }>(
              observer,
              "SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity WHERE application_name = ? AND pid <> pg_backend_pid()",
              [ours],
            );
            ended += count!.count;
          }
          world.trace.push(`  database away 1.5 s: ${ended} connection(s) ended`);
        }
        await Promise.all(sent.map((request) => request.settled));
      },
    ],
    [
      faults.connectionLost ? 2 : 0,
      "commit answer lost",
      async () => {
        // A debit whose COMMIT PostgreSQL takes but whose answer never comes back, the database then
        // away for 1 s: forced through a relay on the instance's debit connection, not left to timing.
        // With the 0.5 s patience of two seeds in three the look-up answers 503 in doubt, else its
        // retried debit finds its own ledger row. Half the time the look-up follows four of its
        // organization on the same instance and key (uncapped when one is), so it is likely debited
        // from a credit lease, whose statement commits on its own: its retry finds it in its
        // lease_usage row, or, when another instance settles the organization while the answer is
        // lost (half of those times), packed with the four before it in a usage row of the ledger.
        const instance = world.pick(world.alive());
        const store = instance.inner as unknown as { debitConnection: ReturnType<typeof openDebitConnection>; lostConnectionPatienceMs: number };
        const organization = world.chance(0.5) ? world.pick(world.organizations) : null;
        const key = organization === null ? null : world.leasableKey(organization);
        for (let count = 0; organization !== null && key !== null && count < 4; count++) {
          const shape: LookUpShape = { kind: "single", organizationId: organization.id, gtins: [FRESH] };
          await (await world.send(instance, shape, key, null, false)).settled;
        }
        // Settled meanwhile, the look-up's retry (patient enough to run) must find it in the ledger:
        // only a lease's debit statement loses its answer then.
        const settleMeanwhile = organization !== null && world.chance(0.5);
        const relay = await startCommitAnswerLoss(world.database.url, 1_000, settleMeanwhile ? ["WITH leased AS"] : ["COMMIT", "WITH leased AS"]);
        const connection = openDebitConnection(relay.url);
        const original = store.debitConnection;
        store.debitConnection = connection;
        world.injected("commit answer lost");
        const patience = store.lostConnectionPatienceMs;
        if (settleMeanwhile) store.lostConnectionPatienceMs = 20_000;
        const request =
          organization === null
            ? freshLookUp(instance)
            : world.sendLookUp(instance, { kind: "single", organizationId: organization.id, gtins: [FRESH] }, key!, null);
        world.trace.push(`  look-up #${request.id} with its debit's COMMIT answer to be lost`);
        if (settleMeanwhile) await settleOnceCut(world, relay, request.settled, organization.id);
        await request.settled;
        store.debitConnection = original;
        store.lostConnectionPatienceMs = patience;
        world.trace.push(`  ${relay.commitsCut()} COMMIT answer(s) lost`);
        relay.close();
        await connection.end({ timeout: 1 }).catch(() => {});
      },
    ],
    [
      faults.connectionLost ? 2 : 0,
      "settlement connection lost",
      async () => {
        // An instance's settlement of lease usage loses its connection between its two statements:
        // the harness locks the organization's row, the settlement (its rows deleted already) waits
        // on it to write the ledger, and the connections waiting on a lock then (the settlement's,
        // and any debit of the organization's) are ended. Its rows come back unsettled (and held)
        // until a later settlement; then every live instance settles at once, and each row is settled once.
        const instance = world.pick(world.alive());
        if (!(instance.inner instanceof PostgresStore)) return;
        const store = instance.inner;
        world.injected("settlement connection lost");
        // Look-ups of one organization one after another: the first ones take a lease, the next spend it.
        const organization = world.pick(world.organizations);
        for (let count = 0; count < 5; count++) {
          const shape: LookUpShape = { kind: "single", organizationId: organization.id, gtins: [FRESH] };
          await (await world.send(instance, shape, world.pick(world.activeKeys(organization)), null, false)).settled;
        }
        const ours = testApplicationName(world.database.url);
        const sql = (observer as PostgresStore).connection;
        const { held, ended, settling } = await sql.begin(async (tx) => {
          await tx`SELECT id FROM organizations WHERE id = ${organization.id} FOR UPDATE`;
          const [unsettled] = await tx<
            Array<{ count: number }>
          >`SELECT coalesce(sum(json_array_length(look_ups)), 0)::int AS count FROM lease_usage WHERE organization_id = ${organization.id}`;
          const settling = store.leases.settle("all").then(
            (count) => `settled ${count}`,
            (error: unknown) => `failed (${(error as { code?: string }).code ?? error})`,
          );
          let ended = 0;
          for (let attempt = 0; attempt < 200 && ended === 0 && unsettled!.count > 0; attempt++) {
            await Bun.sleep(5);
            const [row] = await tx<Array<{ count: number }>>`
              SELECT count(pg_terminate_backend(pid))::int AS count FROM pg_stat_activity
              WHERE application_name = ${ours} AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`;
            ended = row!.count;
          }
          return { held: unsettled!.count, ended, settling };
        });
        world.trace.push(`  ${held} unsettled leased look-up(s), ${ended} settlement connection(s) ended: ${await settling}`);
        const raced = await Promise.allSettled(world.alive().map((other) => (other.inner as PostgresStore).leases.settle("all")));
        world.trace.push(
          `  settled at once by ${raced.map((outcome) => (outcome.status === "fulfilled" ? outcome.value : "failed")).join(" and ")} look-up(s)`,
        );
      },
    ],
    [
      faults.connectionLost ? 2 : 0,
      "change listener lost",
      async () => {
        // An instance's change listener loses its connection (the notifications sent meanwhile are
        // lost): until it listens again it remembers nothing, so a key revoked meanwhile is refused
        // at once, and a credit change is read. It listens again within a second.
        const instance = world.pick(world.alive());
        if (!(instance.inner instanceof PostgresStore)) return;
        world.injected("change listener lost");
        await instance.inner.changes.dropConnection();
        world.trace.push(`  ${instance.name} lost its change listener`);
      },
    ],
    [
      faults.lockHeld ? 2 : 0,
      "lock held",
      async () => {
        world.injected("lock held");
        await world.lockReleased;
        const holder = new Worker(new URL("./lock-holder.ts", import.meta.url));
        const path = world.database.url.slice("sqlite:".length);
        const next = (text: string) =>
          new Promise<void>((resolve) =>
            holder.addEventListener("message", function listen(event) {
              if ((event as MessageEvent).data !== text) return;
              holder.removeEventListener("message", listen);
              resolve();
            }),
          );
        holder.addEventListener("message", (event) => {
          const text = String((event as MessageEvent).data);
          if (text.startsWith("failed")) world.trace.push(`  lock not taken: ${text}`);
        });
        const locked = next("locked");
        world.lockReleased = next("released").then(() => holder.terminate());
        holder.postMessage({ path, ms: world.pick([20, 100, 300]) });
        await Promise.race([locked, world.lockReleased]);
      },
    ],
    [
      faults.stall ? 3 : 0,
      "retry during a stall",
      async () => {
        // A keyed look-up stalls and its client retries, on any instance (on PostgreSQL one may run
        // 61 s ahead): at once, when the retry must answer 409, or once the claim's age (60 s) has
        // passed, when the retry takes the claim over and runs, and the first, when it goes on, is
        // fenced out of billing.
        world.injected("retry during a stall");
        const abandoned = world.chance(0.5);
        const organization = world.pick(world.organizations);
        const shape: LookUpShape = world.chance(0.5)
          ? { kind: "single", organizationId: organization.id, gtins: [STALLING] }
          : { kind: "batch", organizationId: organization.id, gtins: [FRESH, STALLING, MISSING] };
        const idempotencyKey = `sim-${world.seed}-${++world.sequence}`;
        world.idempotencyKeys.set(idempotencyKey, shape);
        const first = await world.send(world.pick(world.alive()), shape, world.pick(world.activeKeys(organization)), idempotencyKey, true);
        if (!first.stalled) return;
        if (abandoned) await world.advance(61_000);
        const retry = await world.send(world.pick(world.alive()), shape, world.pick(world.activeKeys(organization)), idempotencyKey, false);
        await Promise.race([retry.settled, Bun.sleep(0)]);
      },
    ],
    [
      faults.stall ? 2 : 0,
      "expiry during a stall",
      async () => {
        // A look-up holds credits of a bucket that expires while it is stalled, and the expiry job runs.
        world.injected("expiry during a stall");
        const organization = world.pick(world.organizations);
        const instance = world.pick(world.alive());
        const amount = 1 + Math.floor(world.random() * 4);
        await instance.store
          .grantCredits({
            organizationId: organization.id,
            source: "grant",
            type: "grant",
            amount,
            expiresAt: instance.clock.now() + 10_000,
            description: "sim grant",
            now: instance.clock.now(),
          })
          .catch((error: unknown) => world.trace.push(`  grant failed: ${error}`));
        world.trace.push(`  ${amount} credits granted to ${organization.id}, expiring in 10 s`);
        const request = await world.send(
          instance,
          { kind: "single", organizationId: organization.id, gtins: [STALLING] },
          world.pick(world.activeKeys(organization)),
          null,
          true,
        );
        if (!request.stalled) return;
        await world.advance(61_000);
        const by = world.pick(world.alive());
        const written = await by.store.expireBuckets(by.clock.now()).catch((error: unknown) => world.trace.push(`  expiry failed: ${error}`));
        world.trace.push(`  ${by.name} wrote off ${written} bucket(s)`);
      },
    ],
    [
      faults.stall ? 2 : 0,
      "refund during a stall",
      async () => {
        // A look-up holds credits of a paid pack (spent before credits that never expire) when the pack is refunded.
        world.injected("refund during a stall");
        const target = world.pick(await paidPurchases(world));
        const instance = world.pick(world.alive());
        const organization = world.organizations.find((candidate) => candidate.id === target.organizationId)!;
        const request = await world.send(
          instance,
          { kind: "batch", organizationId: organization.id, gtins: [FRESH, STALLING, STALE, MISSING] },
          world.pick(world.activeKeys(organization)),
          null,
          true,
        );
        if (request.stalled) await refundNow(world, target);
      },
    ],
    [
      faults.secondServe ? 1 : 0,
      "second serve",
      async () => {
        world.injected("second serve");
        // A second serve on the file would spend what the first holds in memory: it must be refused.
        let lock: ReturnType<typeof lockDatabaseForServing> = null;
        try {
          lock = lockDatabaseForServing(world.database.url);
        } catch (error) {
          world.trace.push(`  refused: ${(error as Error).message.slice(0, 40)}…`);
          return;
        }
        lock?.release();
        world.violations.push(
          `step ${world.trace.length}: a second serve started on the SQLite file that ${world
            .alive()
            .map((instance) => instance.name)
            .join(", ")} serve(s)`,
        );
      },
    ],
  ];
}
