// Sessions for billing tests, written straight into the database: the sign-in endpoints belong to
// another module, and the guard only needs a users row and a sessions row.
import { drizzle } from "drizzle-orm/bun-sqlite";
import * as schema from "../../src/db/schema/sqlite";
import type { SQLiteStore } from "../../src/db/sqlite-store";
import { hashSecret } from "../../src/lib/crypto";
import { newId, newRandomToken } from "../../src/lib/ids";
import type { TestContext } from "../helpers";

const HOUR = 3_600_000;

export interface TestSession {
  userId: string;
  sessionId: string;
  /** `session=<id>.<secret>`, for the Cookie header. */
  cookie: string;
  /** Cookie plus a same-origin Origin, as a browser sends on a form post or fetch. */
  headers: Record<string, string>;
}

/** A signed-in owner of `organizationId`, with a session valid for 24 hours from the test clock. */
export function createSession(context: TestContext, organizationId: string, options: { email?: string } = {}): TestSession {
  const db = drizzle((context.store as SQLiteStore).connection, { schema });
  const now = context.clock.now();
  const userId = newId("usr", now);
  db.insert(schema.users)
    .values({ id: userId, email: options.email ?? `${userId}@example.test`, name: "Test Owner", subject: `sub-${userId}`, organizationId, role: "owner", createdAt: now })
    .run();
  const sessionId = newId("ses", now);
  const secret = newRandomToken(24);
  db.insert(schema.sessions)
    .values({ id: sessionId, tokenHash: hashSecret(secret), userId, createdAt: now, expiresAt: now + 24 * HOUR, absoluteExpiresAt: now + 30 * 24 * HOUR })
    .run();
  const cookie = `session=${sessionId}.${secret}`;
  return { userId, sessionId, cookie, headers: { cookie, origin: new URL(context.services.config.publicUrl).origin } };
}
