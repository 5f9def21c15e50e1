// The group commit's debit on PostgreSQL: a batch of commits written in one transaction on the
// store's debit connection, in two steps: the rows the batch needs are locked and read, this instance
// plans the debit (planDebits, the one debit planner), and one plain statement writes the plan.
import type postgres from "postgres";
import { utcMonth } from "../../lib/clock";
import { BILLED_REASON, type UsageRecord } from "../store";
import { CHANGES_CHANNEL } from "../change-listener";
import { fefoOrder } from "./allocation";
import { type Debit, type DebitPlan, type LockedState, planDebits } from "./debit-plan";
import { type LedgerRow, ledgerRows, PACKED_SPAN_MS } from "./packed-ledger";
import type { Lease } from "./postgres-leases";

/**
 * The same order inside postgres.js statements: a fragment of constant text (a template call with
 * no parameters, as `sql` written inline would make), so each statement's text and plan stay one.
 */
export function fefo(sql: postgres.Sql | postgres.TransactionSql, table?: string): postgres.PendingQuery<postgres.Row[]> {
  return constantText(sql, fefoOrder(table));
}

/** Of an api_keys row: its requests take the capped path (as CAPPED_KEY says it in drizzle). */
export function cappedKey(sql: postgres.Sql | postgres.TransactionSql): postgres.PendingQuery<postgres.Row[]> {
  return constantText(sql, "(monthly_credit_limit IS NOT NULL OR status <> 'ACTIVE')");
}

/**
 * One strings array per text, as a template literal has: postgres.js keeps an entry per strings
 * array it sees (the query's origin, for its error messages) and never lets go of it, so a new array
 * per statement would grow the process's memory with every statement.
 */
const constantStrings = new Map<string, TemplateStringsArray>();

function constantText(sql: postgres.Sql | postgres.TransactionSql, text: string): postgres.PendingQuery<postgres.Row[]> {
  let strings = constantStrings.get(text);
  if (strings === undefined) {
    strings = Object.assign([text], { raw: [text] }) as unknown as TemplateStringsArray;
    constantStrings.set(text, strings);
  }
  return sql(strings);
}

/** Credits a request of an uncapped key holds in this instance's memory until its debit takes them (see reserveCredits). */
export interface HeldCredits {
  organizationId: string;
  amount: number;
  keyId: string | null;
  requestId: string;
  /** While its debit is being written. */
  committing: boolean;
  /** The lease the credits are held against; absent: they are held against the buckets. */
  lease?: Lease;
}

/** A commit waiting for the group commit; its ledger row's id is fixed once, so a retried debit is recognized. */
export interface PendingDebit {
  reservationId: string;
  usage: UsageRecord;
  held: HeldCredits | null;
  transactionId: string;
  resolve: (committed: boolean) => void;
  reject: (error: unknown) => void;
}

/**
 * What the debit statement did with one commit; absent: nothing (the reservation was gone, or its
 * claim taken over). `spendable`: of a hold's organization, the credits its buckets have left once
 * the batch committed (read under the batch's locks, so exact at that moment).
 */
export type DebitOutcome = { outcome: "committed"; spendable?: number } | { outcome: "spent"; available: number };

/**
 * The CTEs that write the webhook events of balances crossing the low-credit threshold or reaching
 * zero (balanceEventTypes in SQL), with their deliveries, from a CTE `crossings` (organization_id,
 * before, after, threshold, created_at): in the statement that moves the balance, so an event exists
 * exactly when its cause does.
 */
export function balanceEvents(sql: postgres.Sql | postgres.TransactionSql) {
  return sql`
      balance_events AS (
        INSERT INTO webhook_events (id, organization_id, type, payload, created_at)
        SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''), organization_id, kind.type, kind.payload, created_at
        FROM crossings CROSS JOIN LATERAL (VALUES
          ('credits.low', threshold IS NOT NULL AND before >= threshold AND after < threshold,
           jsonb_build_object('organizationId', organization_id, 'balance', after, 'threshold', threshold)::text),
          ('credits.depleted', before > 0 AND after <= 0, jsonb_build_object('organizationId', organization_id, 'balance', after)::text)
        ) AS kind(type, crossed, payload)
        WHERE kind.crossed
        RETURNING id, organization_id, type, created_at
      ),
      balance_deliveries AS (
        INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at)
        SELECT e.id, balance_events.id, 'pending', 0, balance_events.created_at, balance_events.created_at
        FROM balance_events JOIN webhook_endpoints e
          ON e.organization_id = balance_events.organization_id AND e.status = 'enabled' AND e.event_types @> jsonb_build_array(balance_events.type)
      )`;
}

// Invariants: of a commit, a release and a sweep racing on one reservation row exactly one wins: each
// locks the row first, and the one that finds it deletes it. Credits held in memory are taken from
// buckets locked in FEFO order, and only while the organization's spendable credits cover every
// item before them in the batch, so no bucket goes below zero whichever instances debit at once.
// One statement writes a whole batch: the usage rows, the buckets, the running ledger sums (each
// organization's row moved once, under its lock, which orders balanceAfter across instances) and
// the Idempotency-Key answers, so they commit together. It commits synchronously (the WAL is flushed
// before anyone is answered): a debit once answered survives a crash of the database server.
export async function debitBatch(
  sql: postgres.Sql,
  items: PendingDebit[],
  options: { retried: boolean; instanceId: string },
): Promise<Map<string, DebitOutcome>> {
  const { plan, written, lockedBy, spendable } = await lockAndPlan(sql, items, options.retried);
  const committed = new Set(plan.committed);
  const claimed = items.filter((item) => item.held === null && committed.has(item.reservationId)).map((item) => item.reservationId);
  const answers = items.filter((item) => item.usage.idempotency !== undefined && committed.has(item.reservationId));
  const extra = sql`${claimedWrite(sql, claimed)}${answersWrite(sql, answers)}`;
  const [done, told, ended] = await Promise.allSettled([
    writePlan(sql, plan, { reason: BILLED_REASON, lockedBy, extra }),
    notifySpendable(sql, spendable, options.instanceId),
    sql`COMMIT`,
  ]);
  if (done.status === "rejected") throw done.reason;
  if (told.status === "rejected") throw told.reason;
  if (ended.status === "rejected") throw ended.reason;
  if (ended.value.command !== "COMMIT") throw new Error(`the transaction ended with ${ended.value.command}`);
  const organizationOf = new Map(items.map((item) => [item.reservationId, item.held?.organizationId]));
  const committedOf = (id: string): DebitOutcome => {
    const organizationId = organizationOf.get(id);
    return { outcome: "committed", spendable: organizationId === undefined ? undefined : spendable.get(organizationId) };
  };
  return new Map<string, DebitOutcome>([
    ...[...written, ...plan.committed].map((id): [string, DebitOutcome] => [id, committedOf(id)]),
    ...plan.spent.map(({ reservationId, available }): [string, DebitOutcome] => [reservationId, { outcome: "spent", available }]),
  ]);
}

/**
 * Which of a retried batch's look-ups have a ledger entry already (their first attempt committed
 * after all): a row of their own, a look-up packed in a lease_usage row, or one packed in a settled
 * usage row, whose `created_at` lies within PACKED_SPAN_MS after the look-up's.
 */
function writtenRead(sql: postgres.Sql, items: PendingDebit[], organizations: string[]) {
  const ids = items.map((item) => item.transactionId);
  const times = items.map((item) => item.usage.now);
  return sql<Array<{ id: string }>>`SELECT id FROM credit_transactions WHERE id = ANY(${ids}::text[])
          UNION ALL SELECT u->>'id' FROM lease_usage, json_array_elements(look_ups) u
          WHERE organization_id = ANY(${organizations}::text[]) AND u->>'id' = ANY(${ids}::text[])
          UNION ALL SELECT u->>'id' FROM credit_transactions t, json_array_elements(t.look_ups) u
          WHERE t.organization_id = ANY(${organizations}::text[]) AND t.look_ups IS NOT NULL
            AND t.created_at BETWEEN ${Math.min(...times)} AND ${Math.max(...times) + PACKED_SPAN_MS} AND u->>'id' = ANY(${ids}::text[])`;
}

/** What the batch's first step reads, beside the locked state: ledger rows written already, Idempotency-Key claims still held, reservation rows. */
interface BatchReads {
  written: Set<string>;
  fences: Set<string>;
  reserved: Map<
    string,
    { organizationId: string; amount: number; keyId: string | null; requestId: string; allocations: Array<{ bucketId: string; amount: number }> }
  >;
}

/**
 * The first step, in one round trip: BEGIN, then the rows the batch needs locked and read in the
 * order every writer of them locks them (Idempotency-Key claims, reservation rows, buckets, the
 * organizations' sums), and the debit planned from them; the transaction is rolled back when a read
 * fails. Only a retry looks for its ledger row (a first attempt's row ids are new); only commits with
 * an Idempotency-Key or a reservation row read those.
 */
async function lockAndPlan(
  sql: postgres.Sql,
  items: PendingDebit[],
  retried: boolean,
): Promise<{ plan: DebitPlan; written: Set<string>; lockedBy: string; spendable: Map<string, number> }> {
  const now = Math.max(...items.map((item) => item.usage.now));
  // A part the batch does not need is not sent: an empty answer stands in for it.
  const none = Promise.resolve([] as postgres.Row[]);
  const rowIds = items.filter((item) => item.held === null).map((item) => item.reservationId);
  const fenced = items.flatMap((item) => (item.usage.idempotency === undefined ? [] : [item.usage.idempotency]));
  const organizations = [...new Set(items.flatMap((item) => (item.held === null ? [] : [item.held.organizationId])))].sort();
  const keyIds = [...new Set(items.flatMap((item) => (item.held?.keyId == null ? [] : [item.held.keyId])))];
  const statements = [
    sql`BEGIN`,
    retried ? writtenRead(sql, items, organizations) : none,
    fenced.length === 0
      ? none
      : sql<Array<{ fence: string }>>`
      SELECT r.scope || ' ' || r.key_hash || ' ' || r.created_at AS fence FROM idempotency_records r
      JOIN unnest(${fenced.map((f) => f.scope)}::text[], ${fenced.map((f) => f.keyHash)}::text[], ${fenced.map((f) => String(f.claimedAt))}::bigint[]) AS c(scope, key_hash, claimed_at)
        ON r.scope = c.scope AND r.key_hash = c.key_hash AND r.created_at = c.claimed_at AND r.status = 'in-progress'
      ORDER BY r.scope, r.key_hash FOR UPDATE OF r`,
    rowIds.length === 0
      ? none
      : sql`SELECT id, organization_id, amount, key_id, request_id, allocations::text AS allocations FROM reservations WHERE id = ANY(${rowIds}::text[]) ORDER BY id FOR UPDATE`,
    ...lockStatements(sql, { organizations, keyIds, rowIds, now }),
    // Marks the transaction as a debit: the buckets' trigger leaves its notice to notifySpendable.
    sql<[{ id: string }]>`SELECT pg_current_xact_id()::text AS id, set_config('price_service.debit', 'on', true) AS debit`,
  ] as const;
  try {
    const [, written, fences, reserved, buckets, sums, keys, [locker]] = await Promise.all(statements);
    const reads: BatchReads = {
      written: new Set(written.map((row) => row.id as string)),
      fences: new Set(fences.map((row) => row.fence as string)),
      reserved: new Map(
        reserved.map((row) => [
          row.id as string,
          {
            organizationId: row.organization_id,
            amount: Number(row.amount),
            keyId: row.key_id,
            requestId: row.request_id,
            allocations: JSON.parse(row.allocations),
          },
        ]),
      ),
    };
    const locked = lockedStateOf(buckets, sums, keys);
    const writtenAlready = items.filter((item) => reads.written.has(item.transactionId)).map((item) => item.reservationId);
    const plan = planDebits(debitsOf(items, reads), locked);
    return { plan, written: new Set(writtenAlready), lockedBy: locker!.id, spendable: spendableAfter(locked, plan) };
  } catch (error) {
    await Promise.allSettled(statements);
    await sql`ROLLBACK`;
    throw error;
  }
}

/**
 * The rows a debit plan reads, locked in the order every writer of them locks them: the buckets of
 * `organizations` (FEFO order), the sums of those and of the organizations of reservation rows
 * `rowIds`, and the keys `keyIds` and those of the rows (their lines, and whether they are capped).
 */
export function lockStatements(sql: postgres.Sql | postgres.TransactionSql, of: { organizations: string[]; keyIds: string[]; rowIds: string[]; now: number }) {
  const { organizations, keyIds, rowIds, now } = of;
  const ofRows = (column: string) => (rowIds.length === 0 ? sql`` : sql` OR id IN (SELECT ${sql(column)} FROM reservations WHERE id = ANY(${rowIds}::text[]))`);
  return [
    sql<Array<{ id: string; organization_id: string; remaining: string }>>`SELECT id, organization_id, remaining FROM credit_buckets
      WHERE organization_id = ANY(${organizations}::text[]) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
      ORDER BY organization_id, ${fefo(sql)} FOR UPDATE`,
    // The sums are locked as an UPDATE locks them (not blocking foreign-key checks of other inserts).
    sql<Array<{ id: string; ledger_balance: string; low_credit_threshold: string | null }>>`
      SELECT id, ledger_balance, low_credit_threshold FROM organizations WHERE id = ANY(${organizations}::text[])${ofRows("organization_id")} ORDER BY id FOR NO KEY UPDATE`,
    sql<Array<{ id: string; line: string; capped: boolean }>>`
      SELECT id, coalesce(line_id, id) AS line, ${cappedKey(sql)} AS capped FROM api_keys
      WHERE id = ANY(${keyIds}::text[])${ofRows("key_id")}`,
  ] as const;
}

/**
 * Tells the other instances, as the batch commits, what the buckets of its organizations hold after
 * it ("<schema> credits <organization> <spendable> <instance>", see ChangeListener), so a client
 * whose requests a load balancer spreads over them reads one balance going down.
 */
function notifySpendable(sql: postgres.Sql, spendable: Map<string, number>, instanceId: string) {
  return sql`SELECT pg_notify(${CHANGES_CHANNEL}, n.nspname || ' credits ' || t.organization_id || ' ' || t.spendable || ' ' || ${instanceId})
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
      unnest(${[...spendable.keys()]}::text[], ${[...spendable.values()].map(String)}::bigint[]) AS t(organization_id, spendable)
    WHERE c.oid = 'credit_buckets'::regclass`;
}

/** Per organization whose buckets the batch locked: what they hold once the plan is written. */
function spendableAfter(locked: LockedState, plan: DebitPlan): Map<string, number> {
  const organizationOf = new Map(locked.buckets.map((bucket) => [bucket.id, bucket.organizationId]));
  const spendable = new Map<string, number>();
  const add = (organizationId: string, amount: number) => spendable.set(organizationId, (spendable.get(organizationId) ?? 0) + amount);
  for (const bucket of locked.buckets) add(bucket.organizationId, bucket.remaining);
  for (const taken of plan.buckets) {
    const organizationId = organizationOf.get(taken.id);
    if (organizationId !== undefined) add(organizationId, -taken.amount);
  }
  return spendable;
}

/** The rows of lockStatements as the debit planner reads them. */
export function lockedStateOf(
  buckets: Array<{ id: string; organization_id: string; remaining: string }>,
  sums: Array<{ id: string; ledger_balance: string; low_credit_threshold: string | null }>,
  keys: Array<{ id: string; line: string; capped: boolean }>,
): LockedState {
  return {
    buckets: buckets.map((row) => ({ id: row.id, organizationId: row.organization_id, remaining: Number(row.remaining) })),
    organizations: new Map(
      sums.map((row) => [
        row.id,
        { ledgerBalance: Number(row.ledger_balance), lowCreditThreshold: row.low_credit_threshold === null ? null : Number(row.low_credit_threshold) },
      ]),
    ),
    keys: new Map(keys.map((row) => [row.id, { line: row.line, capped: row.capped }])),
  };
}

/**
 * The batch's commits as the debits planDebits takes, in batch order. Left out (no outcome): a debit
 * written already (its statement committed, but its caller saw an error), a request whose
 * Idempotency-Key claim was taken over meanwhile (the claim, locked until this commits, fences the
 * debit), and a reservation row released or swept meanwhile.
 */
function debitsOf(items: PendingDebit[], reads: BatchReads): Debit[] {
  return items.flatMap(({ reservationId, transactionId, usage, held }): Debit[] => {
    if (reads.written.has(transactionId)) return [];
    const fence = usage.idempotency;
    if (fence !== undefined && !reads.fences.has(`${fence.scope} ${fence.keyHash} ${fence.claimedAt}`)) return [];
    const common = {
      reservationId,
      transactionId,
      gtin: usage.gtin,
      description: usage.description,
      createdAt: usage.now,
      month: utcMonth(usage.now),
      items: usage.items ?? 1,
    };
    if (held !== null) return [{ ...common, organizationId: held.organizationId, amount: held.amount, keyId: held.keyId, requestId: held.requestId }];
    const row = reads.reserved.get(reservationId);
    if (row === undefined) return [];
    const { allocations, ...reservation } = row;
    return [{ ...common, ...reservation, allocated: { allocations, inBuckets: false } }];
  });
}

/** The reservation rows the batch debits, deleted (the deletion claims them; their credits left the buckets when reserved). */
function claimedWrite(sql: postgres.Sql, reservationIds: string[]) {
  if (reservationIds.length === 0) return sql``;
  return sql`, claimed AS (DELETE FROM reservations WHERE id = ANY(${reservationIds}::text[]))`;
}

/** The Idempotency-Key answers of the batch's billed requests, completed with their debit. */
function answersWrite(sql: postgres.Sql, items: PendingDebit[]) {
  if (items.length === 0) return sql``;
  const answers = items.map((item) => item.usage.idempotency!);
  return sql`, completed AS (
        UPDATE idempotency_records SET status = 'done', response_status = t.response_status, response_body = t.response_body
        FROM unnest(${answers.map((a) => a.scope)}::text[], ${answers.map((a) => a.keyHash)}::text[], ${answers.map((a) => String(a.claimedAt))}::bigint[],
                    ${answers.map((a) => a.responseStatus)}::int[], ${answers.map((a) => a.responseBody)}::text[])
          AS t(scope, key_hash, claimed_at, response_status, response_body)
        WHERE idempotency_records.scope = t.scope AND idempotency_records.key_hash = t.key_hash AND idempotency_records.created_at = t.claimed_at
      )`;
}

/** The CTE `ledger`: the usage rows. */
function ledgerWrite(sql: postgres.Sql | postgres.TransactionSql, rows: LedgerRow[]) {
  return sql`ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at, first_created_at, look_ups)
        SELECT id, organization_id, 'usage', amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at, first_created_at, look_ups::json
        FROM unnest(${rows.map((r) => r.id)}::text[], ${rows.map((r) => r.organizationId)}::text[], ${rows.map((r) => String(r.amount))}::bigint[],
                    ${rows.map((r) => String(r.balanceAfter))}::bigint[], ${rows.map((r) => r.bucketId)}::text[], ${rows.map((r) => r.keyId)}::text[],
                    ${rows.map((r) => r.requestId)}::text[], ${rows.map((r) => r.gtin)}::text[], ${rows.map((r) => r.description)}::text[],
                    ${rows.map((r) => String(r.createdAt))}::bigint[], ${rows.map((r) => (r.firstCreatedAt === null ? null : String(r.firstCreatedAt)))}::bigint[],
                    ${rows.map((r) => (r.lookUps === null ? null : JSON.stringify(r.lookUps)))}::text[])
          AS t(id, organization_id, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at, first_created_at, look_ups)
      )`;
}

/** The CTE `counted`: a plan's usage counters added under `reason`. */
export function countersWrite(sql: postgres.Sql | postgres.TransactionSql, counters: DebitPlan["counters"], reason: string) {
  return sql`counted AS (
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, period_ms, period_start, key_id, ${reason}, requests, credits
        FROM unnest(${counters.map((c) => c.organizationId)}::text[], ${counters.map((c) => c.periodMs)}::int[], ${counters.map((c) => String(c.periodStart))}::bigint[],
                    ${counters.map((c) => c.keyId)}::text[], ${counters.map((c) => c.requests)}::int[], ${counters.map((c) => String(c.credits))}::bigint[])
          AS t(organization_id, period_ms, period_start, key_id, requests, credits)
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason)
        DO UPDATE SET requests = usage_counters.requests + excluded.requests, credits = usage_counters.credits + excluded.credits
      )`;
}

/**
 * A planned debit written by one plain statement (the buckets, the organizations' sums, the usage
 * rows, packed with `packLedger`, the usage counters under `reason`, the key lines' monthly spending
 * and the balance events with their deliveries), with `extra` CTEs of the caller. With `lockedBy`, the statement fails whole
 * outside the transaction that locked the rows: postgres.js sends a query on a new connection when
 * the old one died, and the rows' locks went with its transaction.
 */
export function writePlan(
  sql: postgres.Sql | postgres.TransactionSql,
  plan: DebitPlan,
  options: { reason: string; lockedBy?: string; packLedger?: boolean; extra?: postgres.PendingQuery<postgres.Row[]> },
) {
  const none = sql``;
  return sql`
      WITH taken AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - t.amount
        FROM unnest(${plan.buckets.map((b) => b.id)}::text[], ${plan.buckets.map((b) => String(b.amount))}::bigint[]) AS t(id, amount) WHERE credit_buckets.id = t.id
      ),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - t.amount
        FROM unnest(${plan.organizations.map((o) => o.id)}::text[], ${plan.organizations.map((o) => String(o.amount))}::bigint[]) AS t(id, amount) WHERE organizations.id = t.id
      ),
      ${ledgerWrite(sql, ledgerRows(plan.ledger, options.packLedger === true))},
      ${countersWrite(sql, plan.counters, options.reason)},
      spending AS (
        INSERT INTO api_key_monthly_usage (key_id, month, spent)
        SELECT * FROM unnest(${plan.spending.map((s) => s.line)}::text[], ${plan.spending.map((s) => s.month)}::text[], ${plan.spending.map((s) => String(s.spent))}::bigint[])
        ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent + excluded.spent
      )
      ${
        plan.crossings.length === 0
          ? none
          : sql`, crossings AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(plan.crossings.map((c) => ({ organization_id: c.organizationId, before: c.before, after: c.after, threshold: c.threshold, created_at: c.createdAt })))}::text::jsonb)
        AS crossings(organization_id text, before bigint, after bigint, threshold bigint, created_at bigint)
    ), ${balanceEvents(sql)}`
      }
      ${options.extra ?? none}
      SELECT ${
        options.lockedBy === undefined
          ? sql`1`
          : sql`CASE WHEN pg_current_xact_id()::text = ${options.lockedBy} THEN 1 ELSE ('the debit''s transaction ' || ${options.lockedBy} || ' was lost')::int END`
      }`;
}
