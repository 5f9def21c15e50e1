// Sessions for billing tests, made through the store (the sign-in endpoints belong to another
// module, and the guard only needs a user and a session), so they work on either store.
import { hashSecret } from "../../src/lib/crypto";
import { newId, newRandomToken } from "../../src/lib/ids";
import type { TestContext } from "../support/context";

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
export async function createSession(context: TestContext, organizationId: string, options: { email?: string } = {}): Promise<TestSession> {
  const { store } = context;
  const now = context.clock.now();
  const subject = `sub-${newId("usr", now)}`;
  const email = options.email ?? `${subject}@example.test`;
  // An owner's invitation, taken up by the first sign-in of a new subject: the user joins the organization.
  await store.upsertInvitation({ email, organizationId, role: "owner", createdAt: now });
  const signedIn = await store.signInSubject({ subject, email, name: "Test Owner", newOrganizationName: "unused", trialCredits: 0, now });
  if (signedIn.outcome !== "joined") throw new Error(`createSession: sign-in outcome ${signedIn.outcome}`);
  const userId = signedIn.user.id;
  const sessionId = newId("ses", now);
  const secret = newRandomToken(24);
  await store.insertSession({
    id: sessionId,
    tokenHash: hashSecret(secret),
    userId,
    createdAt: now,
    expiresAt: now + 24 * HOUR,
    absoluteExpiresAt: now + 30 * 24 * HOUR,
    revokedAt: null,
  });
  const cookie = `session=${sessionId}.${secret}`;
  return { userId, sessionId, cookie, headers: { cookie, origin: new URL(context.services.config.publicUrl).origin } };
}
