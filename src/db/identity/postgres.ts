import { and, desc, eq, gt, isNotNull, isNull, lte, or } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { newId } from "../../lib/ids";
import { isUniqueViolation, TRANSACTION_ATTEMPTS } from "../database-errors";
import { grant } from "../ledger/operations";
import { type AsyncLedgerPort, runAsync } from "../ledger/port";
import * as schema from "../schema/postgres";
import { SYSTEM_USER_ID } from "../store";
import type { Invitation, Organization, SessionRecord, SessionWithUser, SignInOutcome, Store, User } from "../store";

const { organizations, users, sessions, invitations } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

/** What the PostgreSQL store lends its identity tables: its retrying transaction, and the ledger port a first sign-in's trial grant runs on. */
export interface PostgresIdentityDeps {
  transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T>;
  ledger(tx: Tx): AsyncLedgerPort;
}

/** Organizations, users, sign-in, sessions and invitations on PostgreSQL. */
export class PostgresIdentity {
  constructor(
    private readonly db: DB,
    private readonly deps: PostgresIdentityDeps,
  ) {}

  private transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return this.deps.transaction(work, config);
  }

  private ledger(tx: Tx): AsyncLedgerPort {
    return this.deps.ledger(tx);
  }

  async createOrganization(input: { name: string; now: number }): Promise<Organization> {
    const organization = { id: newId("org", input.now), name: input.name, createdAt: input.now };
    await this.db.insert(organizations).values(organization);
    return organization;
  }

  async getOrganization(id: string): Promise<Organization | null> {
    const [row] = await this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .where(eq(organizations.id, id));
    return row ?? null;
  }

  async listOrganizations(): Promise<Organization[]> {
    return this.db
      .select({ id: organizations.id, name: organizations.name, createdAt: organizations.createdAt })
      .from(organizations)
      .orderBy(desc(organizations.id));
  }

  async ensureSystemUser(now: number): Promise<User> {
    await this.db
      .insert(users)
      .values({ id: SYSTEM_USER_ID, email: null, name: "system", subject: null, organizationId: null, role: "member", createdAt: now })
      .onConflictDoNothing();
    const [user] = await this.db.select().from(users).where(eq(users.id, SYSTEM_USER_ID));
    return user!;
  }

  async findSessionWithUser(sessionId: string): Promise<SessionWithUser | null> {
    const [row] = await this.db.select().from(sessions).innerJoin(users, eq(users.id, sessions.userId)).where(eq(sessions.id, sessionId));
    return row ? { session: row.sessions, user: row.users } : null;
  }

  // Invariant: one transaction decides; two first sign-ins of one identity racing on two instances
  // collide on the unique subject (or email) index, and the loser runs again and finds the winner's user.
  async signInSubject(input: Parameters<Store["signInSubject"]>[0]): Promise<SignInOutcome> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.transaction(async (tx): Promise<SignInOutcome> => {
          const [existing] = await tx.select().from(users).where(eq(users.subject, input.subject));
          if (existing !== undefined) return { outcome: "existing", user: existing };
          const [taken] = await tx.select({ id: users.id }).from(users).where(eq(users.email, input.email));
          if (taken !== undefined) return { outcome: "email-taken" };

          // Deleting the invitation is what claims it: of two sign-ins racing for it, one gets the row.
          const [invitation] = await tx.delete(invitations).where(eq(invitations.email, input.email)).returning();
          let organizationId: string;
          if (invitation !== undefined) {
            organizationId = invitation.organizationId;
          } else {
            organizationId = newId("org", input.now);
            await tx.insert(organizations).values({ id: organizationId, name: input.newOrganizationName, createdAt: input.now });
            if (input.trialCredits > 0) {
              await runAsync(
                grant(organizationId, { source: "trial", type: "trial", amount: input.trialCredits, expiresAt: null, description: "Trial credits" }, input.now),
                this.ledger(tx),
              );
            }
          }
          const user: User = {
            id: newId("usr", input.now),
            email: input.email,
            name: input.name,
            subject: input.subject,
            organizationId,
            role: invitation?.role ?? "owner",
            createdAt: input.now,
          };
          await tx.insert(users).values(user);
          return { outcome: invitation !== undefined ? "joined" : "created", user };
        });
      } catch (error) {
        if (attempt >= TRANSACTION_ATTEMPTS || !isUniqueViolation(error)) throw error;
      }
    }
  }

  async getUserByEmail(email: string): Promise<User | null> {
    const [user] = await this.db.select().from(users).where(eq(users.email, email));
    return user ?? null;
  }

  async insertSession(session: SessionRecord): Promise<void> {
    await this.db.insert(sessions).values(session);
  }

  // Invariant: the conditional update on the current token hash lets one of two concurrent refreshes win.
  async rotateSessionToken(input: Parameters<Store["rotateSessionToken"]>[0]): Promise<SessionRecord | null> {
    const [row] = await this.db
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
      .returning();
    return row ?? null;
  }

  async revokeSession(id: string, now: number): Promise<boolean> {
    const changed = await this.db
      .update(sessions)
      .set({ revokedAt: now })
      .where(and(eq(sessions.id, id), isNull(sessions.revokedAt)))
      .returning({ id: sessions.id });
    return changed.length === 1;
  }

  async deleteDeadSessions(now: number): Promise<number> {
    const deleted = await this.db
      .delete(sessions)
      .where(or(isNotNull(sessions.revokedAt), lte(sessions.expiresAt, now)))
      .returning({ id: sessions.id });
    return deleted.length;
  }

  async upsertInvitation(invitation: Invitation): Promise<Invitation> {
    await this.db
      .insert(invitations)
      .values(invitation)
      .onConflictDoUpdate({
        target: invitations.email,
        set: { organizationId: invitation.organizationId, role: invitation.role, createdAt: invitation.createdAt },
      });
    return invitation;
  }
}
