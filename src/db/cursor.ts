// The ledger cursor: the (createdAt, id) of the last row of a page, base64url so clients treat it as
// opaque. Pages are ordered by the same pair, so rows inserted meanwhile (always newer) never shift them.

export interface LedgerPosition {
  createdAt: number;
  id: string;
}

export function encodeLedgerCursor(position: LedgerPosition): string {
  return Buffer.from(`${position.createdAt}.${position.id}`).toString("base64url");
}

/** The position a cursor names, or null when it is not one this service made. */
export function decodeLedgerCursor(cursor: string): LedgerPosition | null {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) return null;
  const match = /^(\d{1,16})\.(txn_[a-z0-9]{1,64})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"));
  if (match === null || !Number.isSafeInteger(Number(match[1]))) return null;
  return { createdAt: Number(match[1]), id: match[2]! };
}
