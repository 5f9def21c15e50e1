import { and, desc, eq, gt, isNull, lt, or, type SQL, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { newId } from "../../lib/ids";
import type { ChangeListener } from "../change-listener";
import { emitPostgres } from "../webhooks/postgres";
import { page, toKeyRecord } from "../rows";
import * as schema from "../schema/postgres";
import type { ApiKeyRecord, BalanceAtKeyRead, KeyControls, KeyCredential, KeyReplacement, NewApiKey, Page } from "../store";
import { keyEventData } from "../webhooks/records";

const { users, apiKeys, creditBuckets, catalogVersion } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

const keyRecordColumns = {
  id: apiKeys.id,
  organizationId: apiKeys.organizationId,
  name: apiKeys.name,
  keyPrefix: apiKeys.keyPrefix,
  status: apiKeys.status,
  replacedBy: apiKeys.replacedBy,
  createdAt: apiKeys.createdAt,
  lastUsedAt: apiKeys.lastUsedAt,
  expiresAt: apiKeys.expiresAt,
  monthlyCreditLimit: apiKeys.monthlyCreditLimit,
  rateLimit: apiKeys.rateLimit,
  createdById: users.id,
  createdByName: users.name,
  createdByEmail: users.email,
};

/** An organization's buckets with credits to spend at `now` (a placeholder); the organization's id is one too unless given. */
export const spendableBuckets = (organizationId: SQL = sql`${sql.placeholder("organizationId")}`) =>
  and(
    eq(creditBuckets.organizationId, organizationId),
    gt(creditBuckets.remaining, 0),
    or(isNull(creditBuckets.expiresAt), gt(creditBuckets.expiresAt, sql.placeholder("now"))),
  );
export const SPENDABLE_BUCKETS = spendableBuckets();

/** Of an api_keys row: its requests take the capped path (a monthly credit limit, or no longer ACTIVE: its line's limit is the live key's). */
export const CAPPED_KEY = sql`(monthly_credit_limit IS NOT NULL OR status <> 'ACTIVE')`;

/** Credentials remembered per instance at most; the oldest go first. */
const REMEMBERED_CREDENTIALS = 50_000;

/**
 * What the PostgreSQL store lends its API keys: its retrying transaction, the catalog version each
 * key read reads, the change listener that says when a remembered credential may be trusted, and
 * the balances its reservations remember.
 */
export interface PostgresKeysDeps {
  transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T>;
  seeCatalogVersion(version: number): void;
  changes: ChangeListener;
  rememberRead(organizationId: string, spendable: number, epoch: number): void;
  rememberedSpendable(organizationId: string): number | undefined;
}

type Credential = Omit<KeyCredential, "balance">;

/** API keys on PostgreSQL: creation, the look-up for the bearer check, listing, rotation, revocation, controls and lastUsedAt. */
export class PostgresKeys {
  constructor(
    private readonly db: DB,
    private readonly deps: PostgresKeysDeps,
  ) {}

  private transaction<T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig): Promise<T> {
    return this.deps.transaction(work, config);
  }

  private seeCatalogVersion(version: number): void {
    this.deps.seeCatalogVersion(version);
  }

  /** Builds a statement on first use, so it is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  private keyQuery() {
    return this.db.select(keyRecordColumns).from(apiKeys).innerJoin(users, eq(users.id, apiKeys.createdBy));
  }

  async insertApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    await this.transaction(async (tx) => {
      await tx.insert(apiKeys).values({ ...key, status: "ACTIVE" });
      await emitPostgres(tx, [
        { id: newId("msg", key.createdAt), organizationId: key.organizationId, type: "key.created", data: keyEventData(key), createdAt: key.createdAt },
      ]);
    });
    return (await this.getApiKeyById(key.id))!;
  }

  private readonly credentialByHash = this.lazy(() =>
    this.db
      .select({
        id: apiKeys.id,
        lineId: sql<string>`coalesce(${apiKeys.lineId}, ${apiKeys.id})`,
        organizationId: apiKeys.organizationId,
        keyPrefix: apiKeys.keyPrefix,
        keyHash: apiKeys.keyHash,
        status: apiKeys.status,
        expiresAt: apiKeys.expiresAt,
        monthlyCreditLimit: apiKeys.monthlyCreditLimit,
        rateLimit: apiKeys.rateLimit,
        catalogVersion: sql<number>`(SELECT coalesce(max(${catalogVersion.version}), 0) FROM ${catalogVersion})`.mapWith(Number),
        spendable:
          sql<number>`(SELECT coalesce(sum(${creditBuckets.remaining}), 0) FROM ${creditBuckets} WHERE ${spendableBuckets(sql`api_keys.organization_id`)})`.mapWith(
            Number,
          ),
        capped: sql<boolean>`${CAPPED_KEY}`,
      })
      .from(apiKeys)
      .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
      .prepare("key_credential_by_hash"),
  );

  // Invariant: a credential is handed out from memory only while the change listener has heard
  // every change since it was read (ChangeListener.canRemember), and every change of a key's
  // credential, by any instance or the operator's CLI, notifies its id (migration 0017). A key
  // revoked anywhere is refused by every instance once the notification arrives (it is sent as the
  // revocation commits), and by this one at once. While the listener does not hear, every request reads.
  private readonly credentials = new Map<string, Credential>();
  /** The hash each remembered key is kept under, by key id (notifications name keys by id). */
  private readonly hashOf = new Map<string, string>();

  /**
   * The key of a data request, with its organization's balance: from memory (see above) with the
   * balance this instance remembers, or read in one statement with the catalog's version (so a
   * look-up reads products at least as new as the imports committed before, see
   * findProductWithOffers) and the balance, which reserveCredits then does not read again.
   */
  async findKeyCredential(keyHash: string, now: number = Date.now()): Promise<KeyCredential | null> {
    const changes = this.deps.changes;
    changes.start();
    const remembered = changes.live ? this.credentials.get(keyHash) : undefined;
    if (remembered !== undefined) return { ...remembered, balance: this.rememberedBalance(remembered) };
    const epoch = changes.epoch;
    const creditsEpoch = changes.creditsEpoch;
    const [row] = await this.credentialByHash().execute({ hash: keyHash, now });
    if (row === undefined) return null;
    const { catalogVersion: version, spendable, capped, ...credential } = row;
    this.seeCatalogVersion(version);
    this.deps.rememberRead(credential.organizationId, spendable, creditsEpoch);
    if (changes.canRemember(epoch)) this.remember(keyHash, credential);
    return { ...credential, balance: { spendable, capped } };
  }

  private remember(keyHash: string, credential: Credential): void {
    if (this.credentials.size >= REMEMBERED_CREDENTIALS) this.forget(this.credentials.values().next().value!.id);
    this.credentials.set(keyHash, credential);
    this.hashOf.set(credential.id, keyHash);
  }

  private rememberedBalance(credential: Credential): BalanceAtKeyRead | undefined {
    const spendable = this.deps.rememberedSpendable(credential.organizationId);
    if (spendable === undefined) return undefined;
    return { spendable, capped: credential.monthlyCreditLimit !== null || credential.status !== "ACTIVE", remembered: true };
  }

  /** A key's credential changed somewhere (ChangeListener). */
  forget(keyId: string): void {
    const keyHash = this.hashOf.get(keyId);
    if (keyHash === undefined) return;
    this.hashOf.delete(keyId);
    this.credentials.delete(keyHash);
  }

  forgetCredentials(): void {
    this.credentials.clear();
    this.hashOf.clear();
  }

  /** After this instance changed a key: forgotten now, not when its own notification comes back. */
  private changedHere(): void {
    this.deps.changes.noteChange();
    this.forgetCredentials();
  }

  async getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.keyQuery().where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId)));
    return row ? toKeyRecord(row) : null;
  }

  async getApiKeyById(id: string): Promise<ApiKeyRecord | null> {
    const [row] = await this.keyQuery().where(eq(apiKeys.id, id));
    return row ? toKeyRecord(row) : null;
  }

  async listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>> {
    const rows = await this.keyQuery()
      .where(and(eq(apiKeys.organizationId, organizationId), query.after ? lt(apiKeys.id, query.after) : undefined))
      .orderBy(desc(apiKeys.id))
      .limit(query.limit + 1);
    return page(rows.map(toKeyRecord), query.limit);
  }

  async revokeApiKey(organizationId: string, id: string, now: number = Date.now()): Promise<ApiKeyRecord | null> {
    const revoked = await this.transaction(async (tx) => {
      const [key] = await tx
        .update(apiKeys)
        .set({ status: "REVOKED" })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({ id: apiKeys.id, organizationId: apiKeys.organizationId, name: apiKeys.name, keyPrefix: apiKeys.keyPrefix });
      if (key === undefined) return false;
      await emitPostgres(tx, [{ id: newId("msg", now), organizationId, type: "key.revoked", data: keyEventData(key), createdAt: now }]);
      return true;
    });
    this.changedHere();
    return revoked ? this.getApiKey(organizationId, id) : null;
  }

  // Invariant: of two instances rotating one key at once, only the one whose conditional update
  // still finds it ACTIVE inserts a replacement. That update locks the row until the commit and
  // returns the name and controls of its latest committed version, which the replacement copies: a
  // PATCH commits before it (and is copied) or waits for it (and then finds the key ROTATED).
  async rotateApiKey(organizationId: string, id: string, replacement: KeyReplacement): Promise<ApiKeyRecord | null> {
    const rotated = await this.transaction(async (tx) => {
      const [copied] = await tx
        .update(apiKeys)
        .set({ status: "ROTATED", replacedBy: replacement.id })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({
          name: apiKeys.name,
          expiresAt: apiKeys.expiresAt,
          monthlyCreditLimit: apiKeys.monthlyCreditLimit,
          rateLimit: apiKeys.rateLimit,
          lineId: sql<string>`coalesce(${apiKeys.lineId}, ${apiKeys.id})`,
        });
      if (copied === undefined) return false;
      // The replacement joins the key's line: what the line spent and holds counts against its limit.
      await tx.insert(apiKeys).values({ ...replacement, ...copied, status: "ACTIVE" });
      const data = keyEventData({ ...replacement, name: copied.name, id }, { replacedBy: replacement.id });
      await emitPostgres(tx, [{ id: newId("msg", replacement.createdAt), organizationId, type: "key.rotated", data, createdAt: replacement.createdAt }]);
      return true;
    });
    this.changedHere();
    return rotated ? this.getApiKeyById(replacement.id) : null;
  }

  async updateApiKeyControls(organizationId: string, id: string, controls: Partial<KeyControls>): Promise<ApiKeyRecord | null> {
    const changed = await this.db
      .update(apiKeys)
      .set({ ...controls, status: "ACTIVE" })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
      .returning({ id: apiKeys.id });
    this.changedHere();
    return changed.length === 1 ? this.getApiKey(organizationId, id) : null;
  }

  /**
   * Each instance writes its own view of lastUsedAt; keeping the greatest value makes them converge
   * whatever order the flushes land in. One autocommit update per key: nothing to deadlock on.
   */
  async touchApiKeys(lastUsed: Map<string, number>): Promise<void> {
    for (const [id, at] of lastUsed) {
      await this.db
        .update(apiKeys)
        .set({ lastUsedAt: sql`greatest(coalesce(${apiKeys.lastUsedAt}, 0), ${at})` })
        .where(eq(apiKeys.id, id));
    }
  }
}
