import { encodeBase32LowerCaseNoPadding } from "@oslojs/encoding";

export type IdPrefix =
  | "org"
  | "usr"
  | "key"
  | "txn"
  | "bkt"
  | "inv"
  | "ord"
  | "req"
  | "res"
  | "ses"
  | "sub"
  | "evt"
  | "src"
  | "run"
  | "ftk"
  | "whe"
  | "msg"
  | "wch";

const ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz";
const pool = new Uint8Array(4096);
let poolOffset = pool.length;

/** Random base36 characters from a pooled buffer: ids are made on the hot path, one syscall per 4 KiB. */
function randomChars(count: number): string {
  let out = "";
  while (out.length < count) {
    if (poolOffset === pool.length) {
      crypto.getRandomValues(pool);
      poolOffset = 0;
    }
    const byte = pool[poolOffset++]!;
    if (byte < 252) out += ALPHABET[byte % 36];
  }
  return out;
}

let lastTime = 0;
let lastTimeText = "000000000";
let sequence = 0;

/**
 * Stripe-style prefixed ids that sort by creation: 9 base36 characters of time in ms, 4 of a
 * per-process sequence (so ids made in the same millisecond still sort in creation order), then 16
 * random characters. Cursor pagination pages on the id alone.
 */
export function newId(prefix: IdPrefix, now: number = Date.now()): string {
  if (now > lastTime) {
    lastTime = now;
    // Made once per millisecond, not per id: ids are made several times per request.
    lastTimeText = now.toString(36).padStart(9, "0");
    sequence = 0;
  } else {
    sequence = (sequence + 1) % 1_679_616;
  }
  return `${prefix}_${lastTimeText}${sequence.toString(36).padStart(4, "0")}${randomChars(16)}`;
}

export function newRandomToken(bytes: number = 24): string {
  const random = new Uint8Array(bytes);
  crypto.getRandomValues(random);
  return encodeBase32LowerCaseNoPadding(random);
}
