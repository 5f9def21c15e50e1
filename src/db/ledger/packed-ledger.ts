// Packed usage rows (PostgreSQL). A lease settlement writes one credit_transactions row per
// organization and stretch of look-ups instead of one per look-up: the row holds their sum and
// packs each look-up's own ledger entry (id, amount, balanceAfter, bucket, key, request, product,
// time). Ledger sum = sum of the rows' amounts as before; the transactions API, the view
// ledger_entries and a retried debit's search read the entries, so a client sees one entry per
// look-up on either store.
//
// A packed row's look-ups lie at most PACKED_SPAN_MS apart by their own times (`first_created_at` is
// the earliest, `created_at` the latest): a reader after the entries before some time T looks at
// rows up to T + PACKED_SPAN_MS, and no further.
import type { LedgerTransaction } from "../store";
import type { PackedLedgerEntry } from "../schema/postgres";
import type { LedgerEntry } from "./debit-plan";

// Rows keep the span they were written with: a smaller one is always safe to adopt, a larger one
// only once every reader uses it.
export const PACKED_SPAN_MS = 60_000;
/** At most this many look-ups per row, so a page of the transactions API reads a bounded row. */
export const PACKED_MAX_ENTRIES = 100;

/** A credit_transactions row as a debit writes it: a look-up's own entry, or several packed. */
export interface LedgerRow extends Omit<LedgerEntry, "requestId"> {
  requestId: string | null;
  firstCreatedAt: number | null;
  lookUps: PackedLedgerEntry[] | null;
}

/**
 * The rows of a plan's ledger entries. Unpacked, a row per entry. Packed, per organization in time
 * order, runs of entries within PACKED_SPAN_MS of their first and at most PACKED_MAX_ENTRIES long: a
 * run of one stays a plain row, a longer one becomes one row with its sum, named by its first
 * entry's id, its balance the lowest of its entries' (the last one debited).
 */
export function ledgerRows(entries: LedgerEntry[], pack: boolean): LedgerRow[] {
  if (!pack) return entries.map(plainRow);
  const rows: LedgerRow[] = [];
  for (const group of Map.groupBy(entries, (entry) => entry.organizationId).values()) {
    const ordered = group.toSorted(byTime);
    for (let start = 0; start < ordered.length; ) {
      let end = start + 1;
      while (end < ordered.length && end - start < PACKED_MAX_ENTRIES && ordered[end]!.createdAt - ordered[start]!.createdAt <= PACKED_SPAN_MS) end++;
      const run = ordered.slice(start, end);
      rows.push(run.length === 1 ? plainRow(run[0]!) : packedRow(run));
      start = end;
    }
  }
  return rows;
}

function plainRow(entry: LedgerEntry): LedgerRow {
  return { ...entry, firstCreatedAt: null, lookUps: null };
}

function packedRow(run: LedgerEntry[]): LedgerRow {
  const first = run[0]!;
  const shared = <K extends "keyId" | "bucketId">(field: K) => (run.every((entry) => entry[field] === first[field]) ? first[field] : null);
  return {
    id: first.id,
    organizationId: first.organizationId,
    amount: run.reduce((sum, entry) => sum + entry.amount, 0),
    balanceAfter: Math.min(...run.map((entry) => entry.balanceAfter)),
    bucketId: shared("bucketId"),
    keyId: shared("keyId"),
    requestId: null,
    gtin: null,
    description: `${run.length} look-ups`,
    createdAt: run[run.length - 1]!.createdAt,
    firstCreatedAt: first.createdAt,
    lookUps: run.map(({ organizationId, ...entry }) => entry),
  };
}

/** The ledger's order of entries: by time, then by id. */
export function byTime(a: { createdAt: number; id: string }, b: { createdAt: number; id: string }): number {
  return a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
}

/** A stored row as read back: `lookUps` set on a packed one. */
export type StoredLedgerRow = LedgerTransaction & { lookUps: PackedLedgerEntry[] | null };

/** The ledger entries a stored row stands for: itself, or its packed look-ups. */
export function entriesOf(row: StoredLedgerRow): LedgerTransaction[] {
  const { lookUps, ...plain } = row;
  if (lookUps === null) return [plain];
  return lookUps.map((entry) => ({ ...entry, organizationId: row.organizationId, type: row.type }));
}

/**
 * A page of ledger entries, newest first, strictly before `before` (on (createdAt, id)) and from
 * `from`: `fetchRows` reads stored rows newest first (on (created_at, id)) after a row cursor, each
 * a row that may hold such an entry. Rows are read until no unread one can hold an entry newer
 * than the page's last: an unread row's entries are no newer than the last read row's `created_at`.
 */
export async function pageOfEntries(
  limit: number,
  bounds: { before: { createdAt: number; id: string } | null; from: number | undefined },
  fetchRows: (after: { createdAt: number; id: string } | null, count: number) => Promise<StoredLedgerRow[]>,
): Promise<LedgerTransaction[]> {
  const { before, from } = bounds;
  const wanted = (entry: LedgerTransaction) => (before === null || byTime(entry, before) < 0) && (from === undefined || entry.createdAt >= from);
  const found: LedgerTransaction[] = [];
  let after: StoredLedgerRow | null = null;
  for (;;) {
    // One row more than the page: the last row read is not final (an unread row may hold an entry
    // at its time), so plain rows at distinct times fill the page in one round.
    const rows = await fetchRows(after, limit + 1);
    for (const row of rows) found.push(...entriesOf(row).filter(wanted));
    found.sort((a, b) => byTime(b, a));
    after = rows[rows.length - 1] ?? null;
    if (rows.length <= limit || after === null) return found.slice(0, limit);
    const settled = after.createdAt;
    if (found.filter((entry) => entry.createdAt > settled).length >= limit) return found.slice(0, limit);
  }
}
