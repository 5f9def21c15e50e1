// The group commit's debit statements on PostgreSQL: a batch of commits written in one transaction on
// the store's debit connection, either as the common two-step debit of credits held in memory
// (debitHeld) or as the general statement (debitBatch) that also takes reservation rows, retries and
// Idempotency-Keys.
import type postgres from "postgres";
import { utcMonth } from "../../lib/clock";
import { BILLED_REASON, DAY_MS, HOUR_MS, type UsageRecord } from "../store";
import { fefoOrder } from "./allocation";
import { type DebitPlan, type HeldDebit, planHeldDebits } from "./debit-plan";

/**
 * The same order inside postgres.js statements: a fragment of constant text (a template call with
 * no parameters, as `sql` written inline would make), so each statement's text and plan stay one.
 */
export function fefo(sql: postgres.Sql | postgres.TransactionSql, table?: string): postgres.PendingQuery<postgres.Row[]> {
  const text = fefoOrder(table);
  return sql(Object.assign([text], { raw: [text] }) as unknown as TemplateStringsArray);
}

/** Credits a request of an uncapped key holds in this instance's memory until its debit takes them (see reserveCredits). */
export interface HeldCredits {
  organizationId: string;
  amount: number;
  keyId: string | null;
  requestId: string;
  /** While its debit is being written. */
  committing: boolean;
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

/** What the debit statement did with one commit; absent: nothing (the reservation was gone, or its claim taken over). */
export type DebitOutcome = { outcome: "committed" } | { outcome: "spent"; available: number };

/**
 * BEGIN, `first`, `then`, COMMIT sent together on `connection` (a pool of one connection, so they
 * go in order on one session, one round trip) instead of sql.begin's three round trips. When a
 * statement fails, PostgreSQL refuses the rest and turns the COMMIT into a ROLLBACK; the first
 * failure is thrown, after every reply is in, so the session is idle again for the next caller.
 */
async function pipelinedTransaction<T extends readonly postgres.MaybeRow[]>(
  connection: postgres.Sql,
  first: postgres.PendingQuery<postgres.Row[]>,
  then: postgres.PendingQuery<T>,
): Promise<T> {
  const [begun, firstDone, result, ended] = await Promise.allSettled([connection`BEGIN`, first, then, connection`COMMIT`]);
  for (const reply of [begun, firstDone, result, ended]) if (reply.status === "rejected") throw reply.reason;
  if (ended.status === "fulfilled" && ended.value.command !== "COMMIT") throw new Error(`the transaction ended with ${ended.value.command}`);
  return (result as PromiseFulfilledResult<T>).value;
}

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

/** The batch as the rows of the debit statement's `input`, in batch order (`seq`). */
function debitRows(items: PendingDebit[]) {
  return items.map(({ reservationId, usage, held, transactionId }, seq) => ({
    seq,
    reservation_id: reservationId,
    transaction_id: transactionId,
    gtin: usage.gtin,
    description: usage.description,
    created_at: usage.now,
    month: utcMonth(usage.now),
    items: usage.items ?? 1,
    idempotency_scope: usage.idempotency?.scope ?? null,
    idempotency_key_hash: usage.idempotency?.keyHash ?? null,
    claimed_at: usage.idempotency?.claimedAt ?? null,
    response_status: usage.idempotency?.responseStatus ?? null,
    response_body: usage.idempotency?.responseBody ?? null,
    held_here: held !== null,
    held_organization_id: held?.organizationId ?? null,
    held_amount: held?.amount ?? null,
    held_key_id: held?.keyId ?? null,
    held_request_id: held?.requestId ?? null,
  }));
}

type DebitRow = ReturnType<typeof debitRows>[number];

/** What the parts of the debit statement are built from. */
interface DebitParts {
  sql: postgres.Sql;
  none: postgres.PendingQuery<postgres.Row[]>;
  rows: DebitRow[];
  retried: boolean;
  /** Some commit carries an Idempotency-Key. */
  fenced: boolean;
  /** Some commit's credits are held in a reservation row. */
  withRows: boolean;
  now: number;
}

// Invariants: of a commit, a release and a sweep racing on one reservation row exactly one wins,
// as deleting the row is what claims it; credits held in memory are taken from buckets locked in
// FEFO order, and only while the organization's spendable credits cover every item before them
// in the batch, so no bucket goes below zero whichever instances debit at once. One statement
// writes a whole batch: the usage rows, the buckets, the running ledger sums (each organization's
// row moved once, under its lock, which orders balanceAfter across instances) and the
// Idempotency-Key answers, so they commit together. It commits synchronously (the WAL is flushed
// before anyone is answered): a debit once answered survives a crash of the database server.
export async function debitBatch(sql: postgres.Sql, items: PendingDebit[], options: { retried: boolean }): Promise<Map<string, DebitOutcome>> {
  if (!options.retried && items.every((item) => item.held !== null && item.usage.idempotency === undefined)) return debitHeld(sql, items);
  const rows = debitRows(items);
  // Buckets must still be unexpired when the credits are taken, by the latest clock of the batch.
  const now = Math.max(...items.map((item) => item.usage.now));
  // A statement's parts each open and lock their tables whether or not they touch a row, so the
  // batch gets only the parts it needs (a retry, Idempotency-Keys, reservation rows): a plain batch
  // of held look-ups, nearly every one, skips four of them.
  const none = sql``;
  const fenced = items.some((item) => item.usage.idempotency !== undefined);
  const withRows = items.some((item) => item.held === null);
  // The buckets are locked first, by a small statement of the same transaction (in the debit's
  // own FEFO order): the debit statement then starts after every earlier debit of those
  // organizations committed, so it never waits on their rows. A statement that waits for a row
  // lock re-checks the row's new version by starting its whole plan again (EvalPlanQual), which
  // for the debit statement cost a quarter of its CPU whenever two instances shared an organization.
  const organizations = [...new Set(items.flatMap((item) => (item.held === null ? [] : [item.held.organizationId])))].sort();
  const locks = sql`
      SELECT 1 FROM credit_buckets WHERE organization_id = ANY(${organizations}::text[]) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
      ORDER BY organization_id, ${fefo(sql)} FOR UPDATE`;
  const parts: DebitParts = { sql, none, rows, retried: options.retried, fenced, withRows, now };
  const debit = sql<
    Array<{ reservation_id: string; outcome: "committed" | "spent"; available: string | null }>
  >`${claimedPart(parts)}${takenPart(parts)}${writtenPart(parts)}      SELECT reservation_id, 'committed' AS outcome, NULL::bigint AS available FROM debits
      UNION ALL
      SELECT reservation_id, 'committed', NULL FROM written
      UNION ALL
      SELECT demand.reservation_id, 'spent', greatest(0, coalesce(spendable.credits, 0) - coalesce(given.amount, 0))
      FROM demand LEFT JOIN spendable USING (organization_id) LEFT JOIN given USING (organization_id)
      WHERE demand.reservation_id NOT IN (SELECT reservation_id FROM granted)`;
  const settled = await pipelinedTransaction(sql, locks, debit);
  return new Map(
    settled.map((row): [string, DebitOutcome] => [
      row.reservation_id,
      row.outcome === "spent" ? { outcome: "spent", available: Number(row.available) } : { outcome: "committed" },
    ]),
  );
}

/** The debit statement's first part: the batch's rows, those written already, those whose Idempotency-Key claim still holds, and the reservation rows they claim. */
function claimedPart({ sql, none, rows, retried, fenced, withRows }: DebitParts) {
  return sql`
      WITH input AS (
        SELECT * FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS input(
          seq int, reservation_id text, transaction_id text, gtin text, description text, created_at bigint, month text, items int,
          idempotency_scope text, idempotency_key_hash text, claimed_at bigint, response_status int, response_body text,
          held_here boolean, held_organization_id text, held_amount bigint, held_key_id text, held_request_id text)
      ),
      -- A debit written already (its statement committed, but its caller saw an error) is not written
      -- again; a first attempt has new ledger row ids, so only a retry looks.
      written AS (
        SELECT input.reservation_id FROM input
        WHERE ${retried ? sql`EXISTS (SELECT 1 FROM credit_transactions WHERE credit_transactions.id = input.transaction_id)` : sql`false`}
      ),
      -- A request whose Idempotency-Key claim was taken over meanwhile is not billed: its claim
      -- (locked until this commits) fences the debit.
      owned AS (
        SELECT input.* FROM input
        WHERE input.reservation_id NOT IN (SELECT reservation_id FROM written)
          ${
            fenced
              ? sql`AND (input.idempotency_scope IS NULL OR input.reservation_id IN (
            SELECT input.reservation_id FROM input JOIN idempotency_records r
              ON r.scope = input.idempotency_scope AND r.key_hash = input.idempotency_key_hash AND r.status = 'in-progress' AND r.created_at = input.claimed_at
            FOR UPDATE OF r))`
              : none
          }
      ),
      ${
        withRows
          ? sql`claimed AS (
        DELETE FROM reservations USING owned WHERE NOT owned.held_here AND reservations.id = owned.reservation_id
        RETURNING reservations.id, reservations.organization_id, reservations.amount, reservations.key_id, reservations.request_id,
                  CASE WHEN jsonb_array_length(reservations.allocations) = 1 THEN reservations.allocations->0->>'bucketId' END AS bucket_id
      ),`
          : none
      }
`;
}

/** The debit statement's second part: the credits held in memory taken from the locked buckets in batch order while they last, and what each item spent. */
function takenPart({ sql, none, withRows, now }: DebitParts) {
  return sql`      -- Credits held in memory, of keys still uncapped (one capped since is not billed here: its
      -- retry takes the capped path), are taken from the buckets in batch order while they last.
      uncapped AS (
        SELECT owned.* FROM owned WHERE owned.held_here AND NOT EXISTS (
          SELECT 1 FROM api_keys WHERE api_keys.id = owned.held_key_id AND (api_keys.monthly_credit_limit IS NOT NULL OR api_keys.status <> 'ACTIVE'))
      ),
      locked AS (
        SELECT id, organization_id, remaining, expires_at FROM credit_buckets
        WHERE organization_id IN (SELECT held_organization_id FROM uncapped) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
        ORDER BY organization_id, ${fefo(sql)}
        FOR UPDATE
      ),
      supply AS (
        SELECT id, organization_id, remaining, (sum(remaining) OVER (PARTITION BY organization_id ORDER BY ${fefo(sql)}) - remaining)::bigint AS before
        FROM locked
      ),
      spendable AS (SELECT organization_id, sum(remaining)::bigint AS credits FROM locked GROUP BY organization_id),
      demand AS (
        SELECT reservation_id, held_organization_id AS organization_id, held_amount AS amount, held_key_id AS key_id, held_request_id AS request_id,
               (sum(held_amount) OVER (PARTITION BY held_organization_id ORDER BY seq) - held_amount)::bigint AS before
        FROM uncapped
      ),
      granted AS (SELECT demand.* FROM demand JOIN spendable USING (organization_id) WHERE demand.before + demand.amount <= spendable.credits),
      given AS (SELECT organization_id, sum(amount)::bigint AS amount FROM granted GROUP BY organization_id),
      taken AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - least(supply.remaining, given.amount - supply.before)
        FROM supply JOIN given USING (organization_id)
        WHERE credit_buckets.id = supply.id AND supply.before < given.amount
      ),
      spent AS (
        -- The ledger row names a bucket when the item's credits all came from one.
        SELECT reservation_id, organization_id, amount, key_id, request_id,
               (SELECT supply.id FROM supply WHERE supply.organization_id = granted.organization_id
                  AND supply.before <= granted.before AND granted.before + granted.amount <= supply.before + supply.remaining) AS bucket_id
        FROM granted
        ${
          withRows
            ? sql`UNION ALL
        SELECT id, organization_id, amount, key_id, request_id, bucket_id FROM claimed`
            : none
        }
      ),
`;
}

/** The debit statement's third part: the ledger sums, the usage rows, the usage counters, the key lines' spending, the balance events and the Idempotency-Key answers. */
function writtenPart({ sql, none, fenced }: DebitParts) {
  return sql`      totals AS (SELECT organization_id, sum(amount)::bigint AS amount FROM spent GROUP BY organization_id),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - totals.amount
        FROM totals WHERE organizations.id = totals.organization_id
        RETURNING organizations.id, organizations.ledger_balance, organizations.low_credit_threshold, totals.amount
      ),
      debits AS (
        -- balanceAfter of a row = the organization's sum after the batch + what its later rows took.
        SELECT input.*, spent.organization_id, spent.amount, spent.key_id, spent.request_id, spent.bucket_id,
               moved.ledger_balance + coalesce(sum(spent.amount) OVER (
                 PARTITION BY spent.organization_id ORDER BY input.seq DESC ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS balance_after
        FROM input JOIN spent USING (reservation_id) JOIN moved ON moved.id = spent.organization_id
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT transaction_id, organization_id, 'usage', -amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at
        FROM debits
      ),
      -- The billed look-ups (a batch's fresh GTINs each) into the hourly usage counters, in the debit's own statement, rows in one
      -- order so batches of several instances lock them alike.
      counted AS (
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, periods.ms, created_at - created_at % periods.ms, coalesce(key_id, ''), ${BILLED_REASON}, sum(items), sum(amount)
        FROM debits CROSS JOIN (VALUES (${HOUR_MS}::int), (${DAY_MS}::int)) AS periods(ms) GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason)
        DO UPDATE SET requests = usage_counters.requests + excluded.requests, credits = usage_counters.credits + excluded.credits
      ),
      -- Each key line's spending of the month moves with its usage rows (the monthly credit limit reads it).
      spending AS (
        INSERT INTO api_key_monthly_usage (key_id, month, spent)
        SELECT coalesce(api_keys.line_id, api_keys.id), month, sum(amount)::bigint FROM debits JOIN api_keys ON api_keys.id = debits.key_id
        GROUP BY 1, 2 ORDER BY 1, 2
        ON CONFLICT (key_id, month) DO UPDATE SET spent = api_key_monthly_usage.spent + excluded.spent
      ),
      -- The webhook events of balances this batch took across the low-credit threshold or to zero
      -- (balanceEventTypes in SQL), with their deliveries: in the debit's own statement, so an
      -- event exists exactly when its debit does. Each organization's sum moves once per batch under
      -- its row lock, so consecutive batches (of any instance) see each crossing once.
      crossings AS (
        SELECT moved.id AS organization_id, moved.ledger_balance + moved.amount AS before, moved.ledger_balance AS after, moved.low_credit_threshold AS threshold,
               (SELECT max(created_at) FROM debits WHERE debits.organization_id = moved.id) AS created_at
        FROM moved
      ),
      ${balanceEvents(sql)}
      ${
        fenced
          ? sql`, completed AS (
        UPDATE idempotency_records SET status = 'done', response_status = debits.response_status, response_body = debits.response_body
        FROM debits
        WHERE debits.idempotency_scope IS NOT NULL AND idempotency_records.scope = debits.idempotency_scope AND idempotency_records.key_hash = debits.idempotency_key_hash
          AND idempotency_records.created_at = debits.claimed_at
      )`
          : none
      }
`;
}

// The common batch (credits held in memory, no Idempotency-Key, first attempt) in two steps of one
// transaction: the buckets, the organizations' sums and the keys are locked and read, this
// instance computes the debit (planHeldDebits), and one plain statement writes it. The big
// statement of debitBatch spent most of its time starting and finishing its plan; this one has no
// joins or window functions left. The second step costs a round trip while the rows are locked.
async function debitHeld(sql: postgres.Sql, items: PendingDebit[]): Promise<Map<string, DebitOutcome>> {
  const debits = heldDebitsOf(items);
  const { plan, lockedBy } = await lockAndPlan(sql, debits);
  await writePlan(sql, plan, lockedBy);
  return new Map<string, DebitOutcome>([
    ...plan.committed.map((id): [string, DebitOutcome] => [id, { outcome: "committed" }]),
    ...plan.spent.map(({ reservationId, available }): [string, DebitOutcome] => [reservationId, { outcome: "spent", available }]),
  ]);
}

/** The batch of held look-ups as the debits planHeldDebits takes. */
function heldDebitsOf(items: PendingDebit[]): HeldDebit[] {
  return items.map(({ reservationId, transactionId, usage, held }) => ({
    reservationId,
    transactionId,
    organizationId: held!.organizationId,
    amount: held!.amount,
    keyId: held!.keyId,
    requestId: held!.requestId,
    gtin: usage.gtin,
    description: usage.description,
    createdAt: usage.now,
    month: utcMonth(usage.now),
    items: usage.items ?? 1,
  }));
}

/**
 * The first step: the batch's buckets, organizations' sums and keys locked and read in one round trip,
 * and the debit planned from them; the transaction is rolled back when a read fails.
 */
async function lockAndPlan(sql: postgres.Sql, debits: HeldDebit[]): Promise<{ plan: DebitPlan; lockedBy: string }> {
  // Buckets must still be unexpired when the credits are taken, by the latest clock of the batch.
  const now = Math.max(...debits.map((debit) => debit.createdAt));
  const organizations = [...new Set(debits.map((debit) => debit.organizationId))].sort();
  const keyIds = [...new Set(debits.flatMap((debit) => (debit.keyId === null ? [] : [debit.keyId])))];
  const begun = sql`BEGIN`;
  const buckets = sql<Array<{ id: string; organization_id: string; remaining: string }>>`
      SELECT id, organization_id, remaining FROM credit_buckets
      WHERE organization_id = ANY(${organizations}::text[]) AND remaining > 0 AND (expires_at IS NULL OR expires_at > ${now})
      ORDER BY organization_id, ${fefo(sql)} FOR UPDATE`;
  // The sums are locked as an UPDATE locks them (not blocking foreign-key checks of other inserts).
  const sums = sql<Array<{ id: string; ledger_balance: string; low_credit_threshold: string | null }>>`
      SELECT id, ledger_balance, low_credit_threshold FROM organizations WHERE id = ANY(${organizations}::text[]) ORDER BY id FOR NO KEY UPDATE`;
  const transaction = sql<[{ id: string }]>`SELECT pg_current_xact_id()::text AS id`;
  const keys = sql<Array<{ id: string; line: string; capped: boolean }>>`
      SELECT id, coalesce(line_id, id) AS line, (monthly_credit_limit IS NOT NULL OR status <> 'ACTIVE') AS capped FROM api_keys WHERE id = ANY(${keyIds}::text[])`;
  let plan: DebitPlan;
  let lockedBy: string;
  try {
    const [, bucketRows, sumRows, keyRows, [locker]] = await Promise.all([begun, buckets, sums, keys, transaction]);
    lockedBy = locker.id;
    plan = planHeldDebits(debits, {
      buckets: bucketRows.map((row) => ({ id: row.id, organizationId: row.organization_id, remaining: Number(row.remaining) })),
      organizations: new Map(
        sumRows.map((row) => [
          row.id,
          { ledgerBalance: Number(row.ledger_balance), lowCreditThreshold: row.low_credit_threshold === null ? null : Number(row.low_credit_threshold) },
        ]),
      ),
      keys: new Map(keyRows.map((row) => [row.id, { line: row.line, capped: row.capped }])),
    });
  } catch (error) {
    await Promise.allSettled([begun, buckets, sums, keys, transaction]);
    await sql`ROLLBACK`;
    throw error;
  }
  return { plan, lockedBy };
}

/** The second step: the planned debit written by one plain statement, then COMMIT, in the transaction that locked its rows. */
async function writePlan(sql: postgres.Sql, plan: DebitPlan, lockedBy: string): Promise<void> {
  const none = sql``;
  const write = sql`
      WITH taken AS (
        UPDATE credit_buckets SET remaining = credit_buckets.remaining - t.amount
        FROM unnest(${plan.buckets.map((b) => b.id)}::text[], ${plan.buckets.map((b) => String(b.amount))}::bigint[]) AS t(id, amount) WHERE credit_buckets.id = t.id
      ),
      moved AS (
        UPDATE organizations SET ledger_balance = organizations.ledger_balance - t.amount
        FROM unnest(${plan.organizations.map((o) => o.id)}::text[], ${plan.organizations.map((o) => String(o.amount))}::bigint[]) AS t(id, amount) WHERE organizations.id = t.id
      ),
      ledger AS (
        INSERT INTO credit_transactions (id, organization_id, type, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
        SELECT id, organization_id, 'usage', amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at
        FROM unnest(${plan.ledger.map((r) => r.id)}::text[], ${plan.ledger.map((r) => r.organizationId)}::text[], ${plan.ledger.map((r) => String(r.amount))}::bigint[],
                    ${plan.ledger.map((r) => String(r.balanceAfter))}::bigint[], ${plan.ledger.map((r) => r.bucketId)}::text[], ${plan.ledger.map((r) => r.keyId)}::text[],
                    ${plan.ledger.map((r) => r.requestId)}::text[], ${plan.ledger.map((r) => r.gtin)}::text[], ${plan.ledger.map((r) => r.description)}::text[],
                    ${plan.ledger.map((r) => String(r.createdAt))}::bigint[])
          AS t(id, organization_id, amount, balance_after, bucket_id, key_id, request_id, gtin, description, created_at)
      ),
      counted AS (
        INSERT INTO usage_counters (organization_id, period_ms, period_start, key_id, reason, requests, credits)
        SELECT organization_id, period_ms, period_start, key_id, ${BILLED_REASON}, requests, credits
        FROM unnest(${plan.counters.map((c) => c.organizationId)}::text[], ${plan.counters.map((c) => c.periodMs)}::int[], ${plan.counters.map((c) => String(c.periodStart))}::bigint[],
                    ${plan.counters.map((c) => c.keyId)}::text[], ${plan.counters.map((c) => c.requests)}::int[], ${plan.counters.map((c) => String(c.credits))}::bigint[])
          AS t(organization_id, period_ms, period_start, key_id, requests, credits)
        ON CONFLICT (organization_id, period_ms, period_start, key_id, reason)
        DO UPDATE SET requests = usage_counters.requests + excluded.requests, credits = usage_counters.credits + excluded.credits
      ),
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
      -- postgres.js sends a query on a new connection when the old one died (the rows' locks went with
      -- its transaction): outside the transaction that computed it, the write fails whole.
      SELECT CASE WHEN pg_current_xact_id()::text = ${lockedBy} THEN 1 ELSE ('the debit''s transaction ' || ${lockedBy} || ' was lost')::int END`;
  const [written, ended] = await Promise.allSettled([write, sql`COMMIT`]);
  if (written.status === "rejected") throw written.reason;
  if (ended.status === "rejected") throw ended.reason;
  if (ended.value.command !== "COMMIT") throw new Error(`the transaction ended with ${ended.value.command}`);
}
