// Soonest-expiring-first (FEFO): the one order in which credits leave their buckets, so credits
// about to expire are spent before they are lost. Buckets that never expire go last; the bucket id
// breaks ties, so every instance locks an organization's buckets in the same order.

/** The FEFO order in SQL, for both dialects (`table.` qualifies the columns in a join). */
export function fefoOrder(table?: string): string {
  const column = (name: string) => (table === undefined ? name : `${table}.${name}`);
  return `${column("expires_at")} ASC NULLS LAST, ${column("id")}`;
}

/** The FEFO order in TypeScript, for buckets read in any order. */
export function byFEFO(a: { id: string; expiresAt: number | null }, b: { id: string; expiresAt: number | null }): number {
  if (a.expiresAt !== b.expiresAt) {
    if (a.expiresAt === null) return 1;
    if (b.expiresAt === null) return -1;
    return a.expiresAt - b.expiresAt;
  }
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Takes `amount` credits from `supply` (already in FEFO order), each bucket emptied before the next
 * is touched; what the supply cannot cover is left untaken (the caller checks the sum first).
 */
export function takeInOrder(supply: ReadonlyArray<{ id: string; free: number }>, amount: number): Array<{ bucketId: string; amount: number }> {
  const taken: Array<{ bucketId: string; amount: number }> = [];
  let missing = amount;
  for (const bucket of supply) {
    if (missing <= 0) break;
    const take = Math.min(bucket.free, missing);
    if (take > 0) taken.push({ bucketId: bucket.id, amount: take });
    missing -= take;
  }
  return taken;
}

/**
 * The bucket that alone supplies the credits from `offset` to `offset + amount` of a FEFO supply
 * (the ledger row of a debit names its bucket only then), or null when they span several.
 */
export function soleBucket(supply: ReadonlyArray<{ id: string; free: number }>, offset: number, amount: number): string | null {
  let before = 0;
  let sole: string | null = null;
  for (const bucket of supply) {
    if (before <= offset && offset + amount <= before + bucket.free) sole = bucket.id;
    before += bucket.free;
  }
  return sole;
}
