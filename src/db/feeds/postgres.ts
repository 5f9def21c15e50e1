import { and, asc, desc, eq, inArray, isNotNull, isNull, lt, lte, or, sql } from "drizzle-orm";
import type { PgTransactionConfig } from "drizzle-orm/pg-core";
import type { PostgresJsDatabase } from "drizzle-orm/postgres-js";
import { page } from "../rows";
import * as schema from "../schema/postgres";
import type { Page } from "../store";
import type {
  FeedRun,
  FeedSource,
  FeedSourceTrust,
  FeedTokenCredential,
  FeedTokenRecord,
  FinishFeedRun,
  NewFeedSource,
  NewFeedToken,
  SourceFreshness,
} from "./records";

const { feedSources, feedRuns, feedTokens, feedSourceFiles, offers } = schema;

type DB = PostgresJsDatabase<typeof schema>;
type Tx = Parameters<Parameters<DB["transaction"]>[0]>[0];

const feedTokenColumns = {
  id: feedTokens.id,
  sourceId: feedTokens.sourceId,
  scope: feedTokens.scope,
  name: feedTokens.name,
  createdAt: feedTokens.createdAt,
  revokedAt: feedTokens.revokedAt,
  lastUsedAt: feedTokens.lastUsedAt,
};

/** Feed sources, runs, tokens and leases on PostgreSQL; `transaction` is the store's retrying one. */
export class PostgresFeeds {
  constructor(
    private readonly db: DB,
    private readonly transaction: <T>(work: (tx: Tx) => Promise<T>, config?: PgTransactionConfig) => Promise<T>,
  ) {}

  async createFeedSource(source: NewFeedSource): Promise<FeedSource | null> {
    const [row] = await this.db
      .insert(feedSources)
      .values({ ...source, nextRunAt: source.intervalMs === null ? null : source.createdAt })
      .onConflictDoNothing({ target: feedSources.name })
      .returning();
    return row ?? null;
  }

  async getFeedSource(idOrName: string): Promise<FeedSource | null> {
    const [row] = await this.db
      .select()
      .from(feedSources)
      .where(or(eq(feedSources.id, idOrName), and(eq(feedSources.name, idOrName), isNull(feedSources.removedAt))))
      .limit(1);
    return row ?? null;
  }

  async listFeedSources(): Promise<FeedSource[]> {
    return this.db.select().from(feedSources).where(isNull(feedSources.removedAt)).orderBy(asc(feedSources.id));
  }

  async setFeedSourceTrust(id: string, trust: FeedSourceTrust): Promise<FeedSource | null> {
    const [row] = await this.db
      .update(feedSources)
      .set({ merchants: trust.merchants, authoritative: trust.authoritative })
      .where(and(eq(feedSources.id, id), isNull(feedSources.removedAt)))
      .returning();
    return row ?? null;
  }

  async removeFeedSource(id: string, now: number): Promise<FeedSource | null> {
    return this.transaction(async (tx) => {
      const [row] = await tx
        .update(feedSources)
        .set({ removedAt: now, name: sql`${feedSources.name} || '#' || ${feedSources.id}`, nextRunAt: null })
        .where(and(eq(feedSources.id, id), isNull(feedSources.removedAt)))
        .returning();
      if (row === undefined) return null;
      await tx
        .update(feedTokens)
        .set({ revokedAt: now })
        .where(and(eq(feedTokens.sourceId, id), isNull(feedTokens.revokedAt)));
      return row;
    });
  }

  // Due and lease are judged by the database's clock, so instances with skewed clocks still agree;
  // SKIP LOCKED lets instances that tick together each take different sources instead of waiting.
  async claimDueFeedSources(input: { owner: string; now: number; leaseMarginMs: number; limit: number }): Promise<FeedSource[]> {
    const now = sql`(extract(epoch from clock_timestamp()) * 1000)::bigint`;
    return this.db
      .update(feedSources)
      .set({
        leaseOwner: input.owner,
        leaseUntil: sql`${now} + (${feedSources.retries} + 1) * ${feedSources.timeoutMs} + ${input.leaseMarginMs}`,
        nextRunAt: sql`${now} + ${feedSources.intervalMs}`,
      })
      .where(
        inArray(
          feedSources.id,
          this.db
            .select({ id: feedSources.id })
            .from(feedSources)
            .where(
              and(
                isNull(feedSources.removedAt),
                isNotNull(feedSources.intervalMs),
                lte(feedSources.nextRunAt, now),
                or(isNull(feedSources.leaseUntil), lte(feedSources.leaseUntil, now)),
              ),
            )
            .orderBy(asc(feedSources.nextRunAt))
            .limit(input.limit)
            .for("update", { skipLocked: true }),
        ),
      )
      .returning();
  }

  async claimFeedSource(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<FeedSource | null> {
    const now = sql`(extract(epoch from clock_timestamp()) * 1000)::bigint`;
    const [row] = await this.db
      .update(feedSources)
      .set({ leaseOwner: input.owner, leaseUntil: sql`${now} + ${input.leaseMs}` })
      .where(and(eq(feedSources.id, input.id), isNull(feedSources.removedAt), or(isNull(feedSources.leaseUntil), lte(feedSources.leaseUntil, now))))
      .returning();
    return row ?? null;
  }

  async finishFeedRun(input: FinishFeedRun): Promise<void> {
    const { run } = input;
    const finishedAt = run.startedAt + run.durationMs;
    await this.transaction(async (tx) => {
      await tx.insert(feedRuns).values(run);
      const owned = input.leaseOwner === null ? sql`false` : sql`${feedSources.leaseOwner} = ${input.leaseOwner}`;
      await tx
        .update(feedSources)
        .set({
          lastRunAt: finishedAt,
          ...(run.status !== "failed" ? { lastSuccessAt: finishedAt } : {}),
          ...(input.validators !== undefined ? { etag: input.validators.etag, lastModified: input.validators.lastModified } : {}),
          leaseOwner: sql`CASE WHEN ${owned} THEN NULL ELSE ${feedSources.leaseOwner} END`,
          leaseUntil: sql`CASE WHEN ${owned} THEN NULL ELSE ${feedSources.leaseUntil} END`,
        })
        .where(eq(feedSources.id, run.sourceId));
      if (input.importedFile !== undefined) {
        await tx
          .insert(feedSourceFiles)
          .values({ sourceId: run.sourceId, ...input.importedFile, runId: run.id })
          .onConflictDoNothing();
      }
    });
  }

  async releaseFeedLease(sourceId: string, owner: string): Promise<void> {
    await this.db
      .update(feedSources)
      .set({ leaseOwner: null, leaseUntil: null })
      .where(and(eq(feedSources.id, sourceId), eq(feedSources.leaseOwner, owner)));
  }

  async renewFeedLease(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<boolean> {
    const now = sql`(extract(epoch from clock_timestamp()) * 1000)::bigint`;
    const renewed = await this.db
      .update(feedSources)
      .set({ leaseUntil: sql`${now} + ${input.leaseMs}` })
      .where(and(eq(feedSources.id, input.id), eq(feedSources.leaseOwner, input.owner)))
      .returning({ id: feedSources.id });
    return renewed.length === 1;
  }

  async listFeedRuns(sourceId: string, query: { limit: number; after?: string }): Promise<Page<FeedRun>> {
    const rows = await this.db
      .select()
      .from(feedRuns)
      .where(and(eq(feedRuns.sourceId, sourceId), query.after === undefined ? undefined : lt(feedRuns.id, query.after)))
      .orderBy(desc(feedRuns.id))
      .limit(query.limit + 1);
    return page(rows, query.limit);
  }

  async hasImportedFeedFile(sourceId: string, file: { name: string; size: number; modifiedAt: number }): Promise<boolean> {
    const [row] = await this.db
      .select({ runId: feedSourceFiles.runId })
      .from(feedSourceFiles)
      .where(
        and(
          eq(feedSourceFiles.sourceId, sourceId),
          eq(feedSourceFiles.name, file.name),
          eq(feedSourceFiles.size, file.size),
          eq(feedSourceFiles.modifiedAt, file.modifiedAt),
        ),
      );
    return row !== undefined;
  }

  async insertFeedToken(token: NewFeedToken): Promise<FeedTokenRecord> {
    await this.db.insert(feedTokens).values(token);
    const { secretHash: _secret, ...record } = token;
    return { ...record, revokedAt: null, lastUsedAt: null };
  }

  async findFeedTokenCredential(id: string): Promise<FeedTokenCredential | null> {
    const [row] = await this.db
      .select({ id: feedTokens.id, sourceId: feedTokens.sourceId, scope: feedTokens.scope, secretHash: feedTokens.secretHash, revokedAt: feedTokens.revokedAt })
      .from(feedTokens)
      .where(eq(feedTokens.id, id));
    return row ?? null;
  }

  async listFeedTokens(): Promise<FeedTokenRecord[]> {
    return this.db.select(feedTokenColumns).from(feedTokens).orderBy(asc(feedTokens.id));
  }

  async revokeFeedToken(id: string, now: number): Promise<FeedTokenRecord | null> {
    const [row] = await this.db
      .update(feedTokens)
      .set({ revokedAt: now })
      .where(and(eq(feedTokens.id, id), isNull(feedTokens.revokedAt)))
      .returning(feedTokenColumns);
    return row ?? null;
  }

  async feedFreshness(freshSince: number): Promise<SourceFreshness[]> {
    return this.db
      .select({
        sourceId: sql<string>`${offers.sourceId}`,
        offers: sql<number>`count(*)::int`,
        freshOffers: sql<number>`(count(*) FILTER (WHERE ${offers.observedAt} >= ${freshSince}))::int`,
      })
      .from(offers)
      .where(isNotNull(offers.sourceId))
      .groupBy(offers.sourceId);
  }
}
