const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const RANDOM_LENGTH = 32;
const CHECKSUM_LENGTH = 6;
const SECRET_BODY = new RegExp(`^[0-9A-Za-z]{${RANDOM_LENGTH + CHECKSUM_LENGTH}}$`);

function toBase62(value: number, width: number): string {
  let out = "";
  for (let rest = value; rest > 0; rest = Math.floor(rest / 62)) out = BASE62[rest % 62] + out;
  return out.padStart(width, "0");
}

/** CRC-32 (IEEE) of the text before the checksum, as 6 base62 characters. */
function checksum(text: string): string {
  return toBase62(Bun.hash.crc32(text), CHECKSUM_LENGTH);
}

/** A new secret: prefix + 32 random base62 characters + 6 characters of checksum (GitHub token style). */
export function generateKeySecret(prefix: string): string {
  // Rejection sampling keeps every base62 character equally likely.
  let body = "";
  while (body.length < RANDOM_LENGTH) {
    const bytes = crypto.getRandomValues(new Uint8Array(48));
    for (const byte of bytes) {
      if (byte < 248 && body.length < RANDOM_LENGTH) body += BASE62[byte % 62];
    }
  }
  const withoutChecksum = prefix + body;
  return withoutChecksum + checksum(withoutChecksum);
}

/** True when the value has the service's prefix, the right length and alphabet, and a matching checksum. */
export function isWellFormedKey(value: string, prefix: string): boolean {
  if (!value.startsWith(prefix)) return false;
  const body = value.slice(prefix.length);
  if (!SECRET_BODY.test(body)) return false;
  const cut = value.length - CHECKSUM_LENGTH;
  return checksum(value.slice(0, cut)) === value.slice(cut);
}

/** The first 8 characters: safe to log and show. */
export function keyPrefixOf(secret: string): string {
  return secret.slice(0, 8);
}
