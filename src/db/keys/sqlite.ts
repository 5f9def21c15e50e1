import { and, desc, eq, lt, sql } from "drizzle-orm";
import type { BunSQLiteDatabase } from "drizzle-orm/bun-sqlite";
import { newId } from "../../lib/ids";
import { page, toKeyRecord } from "../rows";
import * as schema from "../schema/sqlite";
import type { ApiKeyRecord, KeyControls, KeyCredential, KeyReplacement, NewApiKey, Page } from "../store";
import { keyEventData, type NewWebhookEvent } from "../webhooks/records";

const { users, apiKeys } = schema;

type DB = BunSQLiteDatabase<typeof schema>;

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

/**
 * What the SQLite store lends its API keys: its write transactions, its read caches (the key cache
 * is the store's own map, cleared with the others), a key's line, and the webhook outbox.
 */
export interface SQLiteKeysDeps {
  write<T>(work: (db: DB) => T): T;
  writeKeepingCaches<T>(work: () => T): T;
  syncCaches(scope?: "this connection" | "all connections"): void;
  keyCache: Map<string, KeyCredential>;
  keyLineOf(keyId: string): string;
  emit(events: NewWebhookEvent[]): void;
}

/** API keys on SQLite: creation, the look-up for the bearer check, listing, rotation, revocation, controls and lastUsedAt. */
export class SQLiteKeys {
  private readonly keyCache: Map<string, KeyCredential>;
  private readonly webhooks: { emit(events: NewWebhookEvent[]): void };

  constructor(
    private readonly db: DB,
    private readonly deps: SQLiteKeysDeps,
  ) {
    this.keyCache = deps.keyCache;
    this.webhooks = { emit: (events) => deps.emit(events) };
  }

  private write<T>(work: (db: DB) => T): T {
    return this.deps.write(work);
  }

  private writeKeepingCaches<T>(work: () => T): T {
    return this.deps.writeKeepingCaches(work);
  }

  private syncCaches(scope?: "this connection" | "all connections"): void {
    this.deps.syncCaches(scope);
  }

  private keyLineOf(keyId: string): string {
    return this.deps.keyLineOf(keyId);
  }

  /** Prepares a statement on first use, so the statement is built once per store. */
  private lazy<T>(build: () => T): () => T {
    let value: T | undefined;
    return () => (value ??= build());
  }

  private keyQuery() {
    return this.db.select(keyRecordColumns).from(apiKeys).innerJoin(users, eq(users.id, apiKeys.createdBy));
  }

  async insertApiKey(key: NewApiKey): Promise<ApiKeyRecord> {
    this.write((tx) => {
      tx.insert(apiKeys)
        .values({ ...key, status: "ACTIVE" })
        .run();
      this.webhooks.emit([
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
      })
      .from(apiKeys)
      .where(eq(apiKeys.keyHash, sql.placeholder("hash")))
      .prepare(),
  );

  async findKeyCredential(keyHash: string): Promise<KeyCredential | null> {
    this.syncCaches("all connections");
    const cached = this.keyCache.get(keyHash);
    if (cached !== undefined) return cached;
    const credential = this.credentialByHash().get({ hash: keyHash });
    if (credential === undefined) return null;
    this.keyCache.set(keyHash, credential);
    return credential;
  }

  async getApiKey(organizationId: string, id: string): Promise<ApiKeyRecord | null> {
    const row = this.keyQuery()
      .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId)))
      .get();
    return row ? toKeyRecord(row) : null;
  }

  async getApiKeyById(id: string): Promise<ApiKeyRecord | null> {
    const row = this.keyQuery().where(eq(apiKeys.id, id)).get();
    return row ? toKeyRecord(row) : null;
  }

  async listApiKeys(organizationId: string, query: { limit: number; after?: string }): Promise<Page<ApiKeyRecord>> {
    const rows = this.keyQuery()
      .where(and(eq(apiKeys.organizationId, organizationId), query.after ? lt(apiKeys.id, query.after) : undefined))
      .orderBy(desc(apiKeys.id))
      .limit(query.limit + 1)
      .all();
    return page(rows.map(toKeyRecord), query.limit);
  }

  async revokeApiKey(organizationId: string, id: string, now: number = Date.now()): Promise<ApiKeyRecord | null> {
    const revoked = this.write((tx) => {
      const [key] = tx
        .update(apiKeys)
        .set({ status: "REVOKED" })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({ id: apiKeys.id, organizationId: apiKeys.organizationId, name: apiKeys.name, keyPrefix: apiKeys.keyPrefix })
        .all();
      if (key === undefined) return false;
      this.webhooks.emit([{ id: newId("msg", now), organizationId, type: "key.revoked", data: keyEventData(key), createdAt: now }]);
      return true;
    });
    return revoked ? this.getApiKey(organizationId, id) : null;
  }

  // The one write transaction that ends the key reads the name and controls the replacement copies,
  // so a PATCH lands either before it (and is copied) or after it (and finds the key ROTATED).
  async rotateApiKey(organizationId: string, id: string, replacement: KeyReplacement): Promise<ApiKeyRecord | null> {
    const rotated = this.write((tx) => {
      const [copied] = tx
        .update(apiKeys)
        .set({ status: "ROTATED", replacedBy: replacement.id })
        .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
        .returning({ name: apiKeys.name, expiresAt: apiKeys.expiresAt, monthlyCreditLimit: apiKeys.monthlyCreditLimit, rateLimit: apiKeys.rateLimit })
        .all();
      if (copied === undefined) return false;
      // The replacement joins the key's line: what the line spent and holds counts against its limit.
      tx.insert(apiKeys)
        .values({ ...replacement, ...copied, status: "ACTIVE", lineId: this.keyLineOf(id) })
        .run();
      const data = keyEventData({ ...replacement, name: copied.name, id }, { replacedBy: replacement.id });
      this.webhooks.emit([{ id: newId("msg", replacement.createdAt), organizationId, type: "key.rotated", data, createdAt: replacement.createdAt }]);
      return true;
    });
    return rotated ? this.getApiKeyById(replacement.id) : null;
  }

  async updateApiKeyControls(organizationId: string, id: string, controls: Partial<KeyControls>): Promise<ApiKeyRecord | null> {
    const changed = this.db
      .update(apiKeys)
      .set({ ...controls, status: "ACTIVE" })
      .where(and(eq(apiKeys.id, id), eq(apiKeys.organizationId, organizationId), eq(apiKeys.status, "ACTIVE")))
      .returning({ id: apiKeys.id })
      .all();
    return changed.length === 1 ? this.getApiKey(organizationId, id) : null;
  }

  async touchApiKeys(lastUsed: Map<string, number>): Promise<void> {
    if (lastUsed.size === 0) return;
    const tx = this.db;
    this.writeKeepingCaches(() => {
      for (const [id, at] of lastUsed) {
        tx.update(apiKeys)
          .set({ lastUsedAt: sql`max(coalesce(${apiKeys.lastUsedAt}, 0), ${at})` })
          .where(eq(apiKeys.id, id))
          .run();
      }
    });
  }
}
