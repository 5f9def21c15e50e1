/** The SQLSTATE or postgres.js code of an error, or of the error drizzle wrapped around it. */
export function errorCode(error: unknown): string | undefined {
  return (error as { cause?: { code?: string }; code?: string } | null)?.cause?.code ?? (error as { code?: string } | null)?.code;
}

/**
 * The connection to PostgreSQL went away or could not be made (PostgreSQL restarted or ended it,
 * the network cut it, a transaction idled past its timeout): what it last sent may have committed.
 */
export function isConnectionLost(error: unknown): boolean {
  const code = errorCode(error) ?? "";
  return (
    code.startsWith("CONNECTION_") ||
    ["CONNECT_TIMEOUT", "ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT", "25P03"].includes(code) ||
    code.startsWith("08") ||
    code.startsWith("57P")
  );
}

/** PostgreSQL refused text that its encoding cannot hold (a NUL character, U+0000): bad input, not a fault. */
export function isUnstorableText(error: unknown): boolean {
  return errorCode(error) === "22021";
}

/** A transaction that lost a deadlock or a serialization check is run again, this many times at most. */
export const TRANSACTION_ATTEMPTS = 3;

/** A unique constraint refused the insert (23505): another transaction inserted the same key first. */
export function isUniqueViolation(error: unknown): boolean {
  return errorCode(error) === "23505";
}
