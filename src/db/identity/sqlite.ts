import { and, desc, eq, gt, isNotNull, isNull, lte, or } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { newId } from "../../lib/ids";
import { grant } from "../ledger/operations";
import { type LedgerPort, runSync } from "../ledger/port";
import * as schema from "../schema/sqlite";
import { SYSTEM_USER_ID } from "../store";
import type { Invitation, Organization, SessionRecord, SessionWithUser, SignInOutcome, Store, User } from "../store";

const { organizations, users, sessions, invitations } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

/** What the SQLite store lends its identity tables: its write transactions, and the ledger port a first sign-in's trial grant runs on. */
export interface SQLiteIdentityDeps {
  write<T>(work: (db: DB) => T): T;
  ledger: LedgerPort;
}

/** Organizations, users, sign-in, sessions and invitations on SQLite. */
export class SQLiteIdentity {
  private readonly ledger: LedgerPort;

  constructor(
    private readonly db: DB,
    private readonly deps: SQLiteIdentityDeps,
  ) {
    this.ledger = deps.ledger;
  }

  private write<T>(work: (db: DB) => T): T {
    return this.deps.write(work);
  }

  async createOrganization(input: { name: string; now: number }): Promise<Organization> {
    const organization = { id: newId("org", input.now), name: input.name, createdAt: input.now };
    this.db.insert(organizations).values(organization).run();
    return organization;
  }

  async getOrganization(id: string): Promise<Organization | null> {
    const row = this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.id, id))
      .get();
    return row ?? null;
  }

  async listOrganizations(): Promise<Organization[]> {
    return this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .orderBy(desc(organizations.id))
      .all();
  }

  async ensureSystemUser(now: number): Promise<User> {
    this.db
      .insert(users)
      .values({ id: SYSTEM_USER_ID, email: null, name: "system", subject: null, organizationId: null, role: "member", createdAt: now })
      .onConflictDoNothing()
      .run();
    return this.db.select().from(users).where(eq(users.id, SYSTEM_USER_ID)).get()!;
  }

  async findSessionWithUser(sessionId: string): Promise<SessionWithUser | null> {
    const row = this.db.select().from(sessions).innerJoin(users, eq(users.id, sessions.userId)).where(eq(sessions.id, sessionId)).get();
    return row ? { session: row.sessions, user: row.users } : null;
  }

  async signInSubject(input: Parameters<Store["signInSubject"]>[0]): Promise<SignInOutcome> {
    return this.write((tx): SignInOutcome => {
      const existing = tx.select().from(users).where(eq(users.subject, input.subject)).get();
      if (existing !== undefined) return { outcome: "existing", user: existing };
      if (tx.select({ id: users.id }).from(users).where(eq(users.email, input.email)).get() !== undefined) return { outcome: "email-taken" };

      const invitation = tx.delete(invitations).where(eq(invitations.email, input.email)).returning().get();
      let organizationId: string;
      if (invitation !== undefined) {
        organizationId = invitation.organizationId;
      } else {
        organizationId = newId("org", input.now);
        tx.insert(organizations).values({ id: organizationId, name: input.newOrganizationName, createdAt: input.now }).run();
        if (input.trialCredits > 0) this.insertTrialGrant(organizationId, input.trialCredits, input.now);
      }
      const user = {
        id: newId("usr", input.now),
        email: input.email,
        name: input.name,
        subject: input.subject,
        organizationId,
        role: invitation?.role ?? ("owner" as const),
        createdAt: input.now,
      };
      tx.insert(users).values(user).run();
      return { outcome: invitation !== undefined ? "joined" : "created", user };
    });
  }

  // The same bucket, ledger row and credits.granted event as grantCredits, inside the sign-in transaction: the ledger port writes on the one SQLite connection, whose transaction is open (SQLite has no nested transactions).
  private insertTrialGrant(organizationId: string, amount: number, now: number): void {
    runSync(grant(organizationId, { source: "trial", type: "trial", amount, expiresAt: null, description: "Trial credits" }, now), this.ledger);
  }

  async getUserByEmail(email: string): Promise<User | null> {
    return this.db.select().from(users).where(eq(users.email, email)).get() ?? null;
  }

  async insertSession(session: SessionRecord): Promise<void> {
    this.db.insert(sessions).values(session).run();
  }

  async rotateSessionToken(input: Parameters<Store["rotateSessionToken"]>[0]): Promise<SessionRecord | null> {
    const row = this.db
      .update(sessions)
      .set({ tokenHash: input.newTokenHash, expiresAt: input.expiresAt })
      .where(
        and(
          eq(sessions.id, input.id),
          eq(sessions.tokenHash, input.currentTokenHash),
          isNull(sessions.revokedAt),
          gt(sessions.expiresAt, input.now),
          gt(sessions.absoluteExpiresAt, input.now),
        ),
      )
      .returning()
      .get();
    return row ?? null;
  }

  async revokeSession(id: string, now: number): Promise<boolean> {
    const changed = this.db
      .update(sessions)
      .set({ revokedAt: now })
      .where(and(eq(sessions.id, id), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id })
      .all();
    return changed.length === 1;
  }

  async deleteDeadSessions(now: number): Promise<number> {
    return this.db
      .delete(sessions)
      .where(or(isNotNull(sessions.revokedAt), lte(sessions.expiresAt, now)))
      .returning({ id: sessions.id })
      .all().length;
  }

  async upsertInvitation(invitation: Invitation): Promise<Invitation> {
    this.db
      .insert(invitations)
      .values(invitation)
      .onConflictDoUpdate({
        target: invitations.email,
        set: { organizationId: invitation.organizationId, role: invitation.role, createdAt: invitation.createdAt },
      })
      .run();
    return invitation;
  }
}
