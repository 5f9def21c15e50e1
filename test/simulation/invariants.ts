// The money invariants, checked after every step (and, once everything has settled, the stricter
// end state): per organization, per key line and per request.
import { IDEMPOTENCY_ABANDONED_MS } from "../../src/http/idempotency";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { hashSecret } from "../../src/lib/crypto";
import { queryRows } from "../support/context";
import type { SentRequest } from "./model";
import type { World } from "./world";

export async function checkInvariants(world: World, settled: boolean): Promise<void> {
  const { observer } = world;
  const violation = (text: string) => world.violations.push(`step ${world.trace.length}: ${text}`);
  const cost = world.config.creditCost;
  // The answers as they stand before any query: requests still running may answer while this
  // awaits, and an answer given after the usage rows were read must not look unbilled.
  const answered = world.requests.map((request) => ({ ...request, answer: request.answer === null ? null : { ...request.answer } }));

  // PostgreSQL's look-ups debited from credit leases wait in lease_usage, packed a row per lease and
  // debit statement, for their settlement into usage rows; their lease's row holds their credits
  // until then. They count one by one, as packed.
  const leased = world.store === "postgres";
  const lookUps = `(SELECT organization_id, in_lease, u->>'keyId' AS key_id, u->>'requestId' AS request_id, (u->>'amount')::bigint AS amount
                    FROM lease_usage, json_array_elements(look_ups) u) AS leased`;
  const unsettledOf = (filter: string) => (leased ? `(SELECT sum(amount) FROM ${lookUps} WHERE ${filter})` : "0");
  if (leased) {
    const [packing] = await queryRows<{ rows: number; outside: number; overspent: number }>(
      observer,
      `SELECT (SELECT count(*)::int FROM lease_usage
               WHERE json_array_length(look_ups) = 0 OR id IS DISTINCT FROM look_ups->0->>'id'
                  OR amount IS DISTINCT FROM (SELECT coalesce(sum((u->>'amount')::bigint), 0) FROM json_array_elements(look_ups) u)) AS rows,
              (SELECT count(*)::int FROM lease_usage u WHERE NOT u.in_lease
                  OR NOT EXISTS (SELECT 1 FROM reservations r WHERE r.id = u.lease_id AND r.instance_id IS NOT NULL)) AS outside,
              (SELECT count(*)::int FROM (
                 SELECT u.lease_id, a->>'bucketId' AS bucket_id, sum((a->>'amount')::bigint) AS spent
                 FROM lease_usage u, json_array_elements(u.look_ups) l, json_array_elements(l->'allocations') a GROUP BY 1, 2) s
               WHERE s.spent > coalesce((SELECT sum((e->>'amount')::bigint) FROM reservations r, jsonb_array_elements(r.allocations) e
                                         WHERE r.id = s.lease_id AND e->>'bucketId' = s.bucket_id), 0)) AS overspent`,
    );
    if (packing!.rows > 0) violation(`${packing!.rows} lease_usage row(s) packing no look-up, or not named by their first, or whose amount is not their sum`);
    if (packing!.outside > 0) violation(`${packing!.outside} lease_usage row(s) outside a lease's row (or of no lease)`);
    if (packing!.overspent > 0) violation(`${packing!.overspent} lease(s) whose unsettled look-ups spent more of a bucket than their row holds of it`);
  }
  for (const organization of world.organizations) {
    const id = organization.id;
    // One statement, so PostgreSQL reads every sum from one snapshot while requests run.
    const [sums] = await queryRows<Record<string, number | null>>(
      observer,
      `SELECT (SELECT sum(amount) FROM ledger_entries WHERE organization_id = ?) AS ledger,
              (SELECT ledger_balance FROM organizations WHERE id = ?) AS running,
              (SELECT sum(remaining) FROM credit_buckets WHERE organization_id = ?) AS remaining,
              (SELECT sum(CASE WHEN remaining < 0 THEN 1 ELSE 0 END) FROM credit_buckets WHERE organization_id = ?) AS negative,
              (SELECT sum(amount) FROM reservations WHERE organization_id = ?) AS reserved,
              ${unsettledOf(`organization_id = '${id}'`)} AS unsettled,
              ${unsettledOf(`organization_id = '${id}' AND NOT in_lease`)} AS outside,
              (SELECT -sum(amount) FROM ledger_entries WHERE organization_id = ? AND type = 'usage') AS used,
              (SELECT sum(credits) FROM usage_counters WHERE organization_id = ? AND period_ms = (SELECT min(period_ms) FROM usage_counters)) AS counted,
              (SELECT sum(CASE WHEN balance_after - amount > 0 AND balance_after <= 0 THEN 1 ELSE 0 END) FROM ledger_entries WHERE organization_id = ?) AS depletions,
              (SELECT sum(CASE WHEN balance_after - amount >= ? AND balance_after < ? THEN 1 ELSE 0 END) FROM ledger_entries WHERE organization_id = ?) AS lows,
              (SELECT count(*) FROM webhook_events WHERE organization_id = ? AND type = 'credits.depleted') AS depleted_events,
              (SELECT count(*) FROM webhook_events WHERE organization_id = ? AND type = 'credits.low') AS low_events`,
      [id, id, id, id, id, id, id, id, organization.lowCreditThreshold, organization.lowCreditThreshold, id, id, id],
    );
    const n = (name: string) => Number(sums?.[name] ?? 0);
    if (n("negative") > 0) violation(`${id}: a bucket is below zero`);
    // SQLite holds credits in memory (they stay in their buckets); PostgreSQL moves a capped key's into reservation rows.
    // A lease's unsettled look-ups are in its reservation row; none outside one (an older version's) are written here.
    if (n("ledger") !== n("remaining") + n("reserved") + n("outside"))
      violation(`${id}: ledger sum ${n("ledger")} ≠ buckets ${n("remaining")} + reserved ${n("reserved")} + unsettled outside a lease ${n("outside")}`);
    if (settled && n("unsettled") !== 0) violation(`${id}: ${n("unsettled")} credits of lease usage still unsettled once everything settled`);
    if (n("running") !== n("ledger")) violation(`${id}: running balance ${n("running")} ≠ ledger sum ${n("ledger")}`);
    if (n("counted") !== n("used")) violation(`${id}: usage counters count ${n("counted")} credits, the usage rows ${n("used")}`);
    if (n("depleted_events") !== n("depletions"))
      violation(`${id}: ${n("depleted_events")} credits.depleted events for ${n("depletions")} times the balance fell to 0`);
    if (n("low_events") !== n("lows"))
      violation(`${id}: ${n("low_events")} credits.low events for ${n("lows")} times the balance fell below ${organization.lowCreditThreshold}`);

    // Per key line (a key and its rotations): its monthly spending is what its usage rows add up to, within its cap.
    const lines = new Map(organization.keys.map((key) => [key.line, organization.keys.filter((other) => other.line === key.line)]));
    for (const [line, keys] of lines) {
      const marks = keys.map(() => "?").join(", ");
      const [row] = await queryRows<Record<string, number | null>>(
        observer,
        `SELECT (SELECT sum(spent) FROM api_key_monthly_usage WHERE key_id = ?) AS spent,
                (SELECT -sum(amount) FROM ledger_entries WHERE type = 'usage' AND key_id IN (${marks})) AS used,
                (SELECT sum(amount) FROM reservations WHERE key_id IN (${marks})) AS held,
                ${unsettledOf(`key_id IN (${keys.map((key) => `'${key.id}'`).join(", ")})`)} AS unsettled`,
        [line, ...keys.map((key) => key.id), ...keys.map((key) => key.id)],
      );
      const spent = Number(row?.spent ?? 0);
      const used = Number(row?.used ?? 0);
      const held = Number(row?.held ?? 0) + Number(row?.unsettled ?? 0);
      if (spent !== used) violation(`key line ${line}: monthly spending ${spent} ≠ its usage rows ${used}`);
      const limit = keys[0]!.monthlyLimit;
      if (limit !== null && used + held > limit) violation(`key line ${line}: ${used} spent + ${held} held > its monthly cap ${limit}`);
    }
  }

  // SQLite holds credits in each instance's memory, per bucket: a bucket never holds more than it has
  // (an expiry, a refund or a debit that took held credits would let two parties spend them). Read
  // in one synchronous step with the holds, so no commit falls in between.
  if (observer instanceof SQLiteStore) {
    const remaining = new Map(
      observer.connection
        .query("SELECT id, remaining FROM credit_buckets")
        .all()
        .map((row) => [(row as { id: string }).id, (row as { remaining: number }).remaining]),
    );
    for (const instance of world.alive()) {
      // The store's money path (ledger/sqlite-holds.ts) keeps the credits held per bucket.
      const holds = (instance.inner as unknown as { holds: { holds: Map<string, number> } }).holds.holds;
      for (const [bucketId, held] of holds)
        if (held > (remaining.get(bucketId) ?? 0))
          violation(`${instance.name} holds ${held} credits of bucket ${bucketId}, which has ${remaining.get(bucketId) ?? 0}`);
    }
  }

  // A look-up debited from a lease counts as packed in its lease_usage row until it is settled into a usage row (one snapshot: never both).
  const usage = await queryRows<{ request_id: string; amount: number }>(
    observer,
    `SELECT request_id, amount FROM ledger_entries WHERE type = 'usage'${leased ? ` UNION ALL SELECT request_id, -amount FROM ${lookUps}` : ""}`,
  );
  const usageRows = new Map<string, number[]>();
  for (const row of usage) usageRows.set(row.request_id, [...(usageRows.get(row.request_id) ?? []), Number(row.amount)]);
  const answeredIds = new Map<string, SentRequest[]>();
  for (const request of answered) {
    const answer = request.answer;
    if (answer === null) continue;
    if (answer.requestId) answeredIds.set(answer.requestId, [...(answeredIds.get(answer.requestId) ?? []), request]);
    if (request.shape.kind === "head" && answer.status !== 405) violation(`HEAD #${request.id} answered ${answer.status}, not 405`);
    if (answer.status === 200 && request.shape.kind !== "head") {
      const fresh = answer.freshItems;
      if (answer.creditsConsumed !== cost * fresh)
        violation(`look-up #${request.id} answered ${fresh} fresh item(s) with creditsConsumed ${answer.creditsConsumed}`);
      if (answer.creditsRemaining === null || answer.creditsRemaining < 0)
        violation(`look-up #${request.id} answered creditsRemaining ${answer.creditsRemaining}`);
    }
    // A key retired before the request was sent (every instance had heard so) is refused, never
    // billed (a HEAD under /api/ is refused before its key is looked at: 405).
    if (request.retiredAtSend && request.shape.kind !== "head" && answer.status !== 401 && answer.status !== 503)
      violation(`look-up #${request.id} by ${request.key.status} key ${request.key.id} answered ${answer.status}`);
    // A retry while the first request with its Idempotency-Key still runs (stalled, holding the
    // claim) is answered 409, unless the claim was abandoned (60 s passed since the first was sent)
    // by the time the retry could have claimed it: a retry still on its way when the clock moves on
    // may take the claim over. A 401 (a retired key) or a 503 (the database away) comes before the claim.
    for (const first of request.stillBlockedBy) {
      if (request.answeredAt - first.sentAt >= IDEMPOTENCY_ABANDONED_MS) continue;
      if (answer.status !== 409 && answer.status !== 401 && answer.status !== 503)
        violation(`retry #${request.id} (Idempotency-Key ${request.idempotencyKey}) answered ${answer.status} while #${first.id} with the same key still ran`);
    }
    if (answer.creditsConsumed === 0) continue;
    const rows = usageRows.get(answer.requestId ?? "") ?? [];
    if (rows.length !== 1)
      violation(
        `look-up #${request.id} answered ${answer.status} with creditsConsumed ${answer.creditsConsumed}, but ${rows.length} usage rows for ${answer.requestId}`,
      );
    else if (-rows[0]! !== answer.creditsConsumed)
      violation(`look-up #${request.id} answered creditsConsumed ${answer.creditsConsumed}, but its usage row took ${-rows[0]!}`);
  }
  for (const [requestId, rows] of usageRows) {
    if (rows.length > 1) violation(`${rows.length} usage rows for one request ${requestId}`);
    const answers = answeredIds.get(requestId);
    // A usage row with no answer belongs to a request still running, or to an instance that died;
    // one whose answer said its debit was in doubt (the database away) may have committed.
    if (answers?.every((request) => request.answer!.creditsConsumed === 0 && !request.answer!.debitInDoubt)) {
      violation(`request ${requestId} was debited but answered ${answers.map((request) => request.answer!.status).join(",")} without claiming the credit`);
    }
  }
  for (const idempotencyKey of world.idempotencyKeys.keys()) {
    const billed = new Set(
      answered
        .filter((request) => request.idempotencyKey === idempotencyKey && request.answer && request.answer.creditsConsumed > 0)
        .map((request) => request.answer!.requestId),
    );
    const debited = [...billed].filter((requestId) => usageRows.has(requestId ?? ""));
    if (debited.length > 1) violation(`Idempotency-Key ${idempotencyKey} was billed ${debited.length} times`);
    if (debited.length === 0) continue;
    // The answer is stored with its debit, in one transaction: a retry replays it and is never billed.
    const [record] = await queryRows<{ status: string; response_status: number | null }>(
      observer,
      "SELECT status, response_status FROM idempotency_records WHERE key_hash = ?",
      [hashSecret(idempotencyKey)],
    );
    if (record?.status !== "done" || Number(record.response_status) !== 200)
      violation(`Idempotency-Key ${idempotencyKey} was billed, but its record is ${record ? `${record.status} ${record.response_status}` : "missing"}`);
  }
  await checkWatchEvents(world, violation);
  if (!settled) return;

  // Everything has settled: no instance holds anything, and each one's balance is the ledger's.
  for (const organization of world.organizations) {
    const [ledger] = await queryRows<{ sum: number | null }>(observer, "SELECT sum(amount) AS sum FROM ledger_entries WHERE organization_id = ?", [
      organization.id,
    ]);
    const ledgerSum = Number(ledger?.sum ?? 0);
    for (const instance of world.alive()) {
      const balance = await instance.store.getBalance(organization.id, instance.clock.now());
      if (balance.reserved !== 0) violation(`${instance.name}: ${balance.reserved} credits of ${organization.id} still held after every request settled`);
      if (balance.available + balance.reserved !== ledgerSum)
        violation(`${instance.name}: balance ${balance.available} + ${balance.reserved} of ${organization.id} ≠ ledger sum ${ledgerSum}`);
    }
  }
  for (const purchase of world.purchases.filter((candidate) => candidate.refunded === candidate.amount || candidate.dispute === "open")) {
    const rows = await queryRows<{ remaining: number }>(
      observer,
      "SELECT b.remaining AS remaining FROM payments p JOIN credit_buckets b ON b.id = p.bucket_id WHERE p.ref = ?",
      [purchase.paymentIntent],
    );
    for (const row of rows)
      if (Number(row.remaining) !== 0)
        violation(
          `${row.remaining} credits of ${purchase.refunded === purchase.amount ? "refunded" : "disputed"} purchase ${purchase.orderId} are still spendable`,
        );
  }
}

/**
 * Price watches: every `price.changed` event has exactly one watch debit (its ledger row carries the
 * event's id) and every watch debit its event, and no watch fires twice for one change.
 */
async function checkWatchEvents(world: World, violation: (text: string) => void): Promise<void> {
  const events = await queryRows<{ id: string; payload: string }>(world.observer, "SELECT id, payload FROM webhook_events WHERE type = 'price.changed'");
  const debits = await queryRows<{ request_id: string }>(
    world.observer,
    "SELECT request_id FROM ledger_entries WHERE type = 'usage' AND description LIKE 'Price watch event%'",
  );
  const billed = new Set(debits.map((row) => row.request_id));
  if (billed.size !== debits.length) violation(`${debits.length - billed.size} watch event(s) debited twice`);
  for (const event of events) if (!billed.has(event.id)) violation(`price.changed event ${event.id} has no watch debit`);
  const ids = new Set(events.map((event) => event.id));
  for (const requestId of billed) if (!ids.has(requestId)) violation(`watch debit ${requestId} has no price.changed event`);
  const changes = new Set<string>();
  for (const event of events) {
    const data = JSON.parse(event.payload) as { watchId: string; current: unknown };
    const change = JSON.stringify([data.watchId, data.current]);
    if (changes.has(change)) violation(`watch ${data.watchId} fired twice for one change`);
    changes.add(change);
  }
}
