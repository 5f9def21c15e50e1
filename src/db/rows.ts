import type { ApiKeyRecord, Page } from "./store";

// Row shapes both store implementations read the same way.

export type KeyRow = Omit<ApiKeyRecord, "createdBy"> & { createdById: string; createdByName: string; createdByEmail: string | null };

export function toKeyRecord(row: KeyRow): ApiKeyRecord {
  const { createdById, createdByName, createdByEmail, ...key } = row;
  return { ...key, createdBy: { id: createdById, name: createdByName, email: createdByEmail } };
}

/** Cuts a `limit + 1` query result into a page; the cursor is the last returned id. */
export function page<T extends { id: string }>(rows: T[], limit: number): Page<T> {
  const items = rows.slice(0, limit);
  return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
}
