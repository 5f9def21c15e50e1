// Another process (the operator CLI: an import, a grant) may hold the SQLite file's write lock for a
// while; a write that finds it locked waits it out here, between event-loop turns.

/** How long a write waits for a write lock that another process holds, retrying between event-loop turns. */
export const LOCK_WAIT_MS = 3_000;

export function isLocked(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code.startsWith("SQLITE_BUSY") || code.startsWith("SQLITE_LOCKED"));
}

/** Runs `attempt` again, with growing pauses, while the database is locked by another connection, for up to LOCK_WAIT_MS. */
export async function whileLocked<T>(attempt: () => T | Promise<T>): Promise<T> {
  const deadline = performance.now() + LOCK_WAIT_MS;
  for (let pause = 2; ; pause = Math.min(pause * 2, 50)) {
    try {
      return await attempt();
    } catch (error) {
      if (!isLocked(error) || performance.now() + pause > deadline) throw error;
    }
    await Bun.sleep(pause);
  }
}
