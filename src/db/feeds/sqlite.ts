import type { Database } from "bun:sqlite";
import { page } from "../rows";
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

const FEED_SOURCE_SELECT = `SELECT id, name, kind, location, format, interval_ms AS intervalMs, timeout_ms AS timeoutMs, retries, etag,
  last_modified AS lastModified, next_run_at AS nextRunAt, lease_owner AS leaseOwner, lease_until AS leaseUntil, last_run_at AS lastRunAt,
  last_success_at AS lastSuccessAt, created_at AS createdAt, removed_at AS removedAt, merchants, authoritative FROM feed_sources`;

/** A feed_sources row as FEED_SOURCE_SELECT reads it: merchants as JSON text, authoritative as 0 or 1. */
type FeedSourceRow = Omit<FeedSource, "merchants" | "authoritative"> & { merchants: string; authoritative: number };

function feedSourceOf(row: FeedSourceRow | null): FeedSource | null {
  return row === null ? null : { ...row, merchants: JSON.parse(row.merchants) as string[], authoritative: row.authoritative === 1 };
}

const FEED_RUN_SELECT = `SELECT id, source_id AS sourceId, trigger, status, started_at AS startedAt, duration_ms AS durationMs, file, http_status AS httpStatus,
  attempts, records_read AS recordsRead, products, offers, rejected_count AS rejectedCount, rejected, error FROM feed_runs`;
const FEED_TOKEN_SELECT = `SELECT id, source_id AS sourceId, scope, name, created_at AS createdAt, revoked_at AS revokedAt, last_used_at AS lastUsedAt FROM feed_tokens`;

/**
 * Feed sources, runs, tokens and leases on SQLite: plain SQL through bun:sqlite's statement cache,
 * since these run a few times a minute, not per request.
 */
export class SQLiteFeeds {
  constructor(
    private readonly database: Database,
    private readonly write: <T>(work: () => T) => T,
  ) {}

  async createFeedSource(source: NewFeedSource): Promise<FeedSource | null> {
    return this.write(() => {
      const taken = this.database.query<{ id: string }, [string]>("SELECT id FROM feed_sources WHERE name = ?").get(source.name);
      if (taken !== null) return null;
      this.database
        .query(
          `INSERT INTO feed_sources (id, name, kind, location, format, interval_ms, timeout_ms, retries, next_run_at, created_at, merchants, authoritative)
           VALUES ($id, $name, $kind, $location, $format, $intervalMs, $timeoutMs, $retries, $nextRunAt, $createdAt, $merchants, $authoritative)`,
        )
        .run({
          ...source,
          nextRunAt: source.intervalMs === null ? null : source.createdAt,
          merchants: JSON.stringify(source.merchants),
          authoritative: source.authoritative ? 1 : 0,
        });
      return this.feedSourceById(source.id);
    });
  }

  private feedSourceById(id: string): FeedSource | null {
    return feedSourceOf(this.database.query<FeedSourceRow, [string]>(`${FEED_SOURCE_SELECT} WHERE id = ?`).get(id));
  }

  async getFeedSource(idOrName: string): Promise<FeedSource | null> {
    return feedSourceOf(
      this.database.query<FeedSourceRow, [string, string]>(`${FEED_SOURCE_SELECT} WHERE id = ? OR (name = ? AND removed_at IS NULL)`).get(idOrName, idOrName),
    );
  }

  async listFeedSources(): Promise<FeedSource[]> {
    return this.database
      .query<FeedSourceRow, []>(`${FEED_SOURCE_SELECT} WHERE removed_at IS NULL ORDER BY id`)
      .all()
      .map((row) => feedSourceOf(row)!);
  }

  async setFeedSourceTrust(id: string, trust: FeedSourceTrust): Promise<FeedSource | null> {
    return this.write(() => {
      const merchants = trust.merchants === undefined ? null : JSON.stringify(trust.merchants);
      const authoritative = trust.authoritative === undefined ? null : Number(trust.authoritative);
      this.database
        .query("UPDATE feed_sources SET merchants = coalesce(?, merchants), authoritative = coalesce(?, authoritative) WHERE id = ? AND removed_at IS NULL")
        .run(merchants, authoritative, id);
      const source = this.feedSourceById(id);
      return source?.removedAt === null ? source : null;
    });
  }

  async removeFeedSource(id: string, now: number): Promise<FeedSource | null> {
    return this.write(() => {
      // The name is freed (suffixed with the id) so a new source may take it; runs keep pointing at the id.
      const changed = this.database
        .query("UPDATE feed_sources SET removed_at = ?, name = name || '#' || id, next_run_at = NULL WHERE id = ? AND removed_at IS NULL")
        .run(now, id).changes;
      if (changed === 0) return null;
      this.database.query("UPDATE feed_tokens SET revoked_at = ? WHERE source_id = ? AND revoked_at IS NULL").run(now, id);
      return this.feedSourceById(id);
    });
  }

  // One serve process per SQLite file (serve's lock), so its own clock is the store's clock.
  async claimDueFeedSources(input: { owner: string; now: number; leaseMarginMs: number; limit: number }): Promise<FeedSource[]> {
    // Asked every second: look first without the write lock, which an operator's import may be holding.
    const anyDue = this.database
      .query(
        "SELECT 1 FROM feed_sources WHERE removed_at IS NULL AND interval_ms IS NOT NULL AND next_run_at <= ? AND (lease_until IS NULL OR lease_until <= ?) LIMIT 1",
      )
      .get(input.now, input.now);
    if (anyDue === null) return [];
    return this.write(() => {
      const due = this.database
        .query<{ id: string }, [number, number, number]>(
          `SELECT id FROM feed_sources WHERE removed_at IS NULL AND interval_ms IS NOT NULL AND next_run_at <= ?
             AND (lease_until IS NULL OR lease_until <= ?) ORDER BY next_run_at LIMIT ?`,
        )
        .all(input.now, input.now, input.limit);
      const claimed: FeedSource[] = [];
      for (const { id } of due) {
        this.database
          .query("UPDATE feed_sources SET lease_owner = ?, lease_until = ? + (retries + 1) * timeout_ms, next_run_at = ? + interval_ms WHERE id = ?")
          .run(input.owner, input.now + input.leaseMarginMs, input.now, id);
        claimed.push(this.feedSourceById(id)!);
      }
      return claimed;
    });
  }

  async claimFeedSource(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<FeedSource | null> {
    return this.write(() => {
      const changed = this.database
        .query("UPDATE feed_sources SET lease_owner = ?, lease_until = ? WHERE id = ? AND removed_at IS NULL AND (lease_until IS NULL OR lease_until <= ?)")
        .run(input.owner, input.now + input.leaseMs, input.id, input.now).changes;
      return changed === 0 ? null : this.feedSourceById(input.id);
    });
  }

  async finishFeedRun(input: FinishFeedRun): Promise<void> {
    const { run } = input;
    this.write(() => {
      this.database
        .query(
          `INSERT INTO feed_runs (id, source_id, trigger, status, started_at, duration_ms, file, http_status, attempts, records_read, products, offers, rejected_count, rejected, error)
           VALUES ($id, $sourceId, $trigger, $status, $startedAt, $durationMs, $file, $httpStatus, $attempts, $recordsRead, $products, $offers, $rejectedCount, $rejected, $error)`,
        )
        .run({ ...run, rejected: JSON.stringify(run.rejected) });
      const succeeded = run.status !== "failed";
      this.database
        .query(
          `UPDATE feed_sources SET last_run_at = $finishedAt,
             last_success_at = CASE WHEN $succeeded THEN $finishedAt ELSE last_success_at END,
             etag = CASE WHEN $hasValidators THEN $etag ELSE etag END,
             last_modified = CASE WHEN $hasValidators THEN $lastModified ELSE last_modified END,
             lease_owner = CASE WHEN lease_owner = $owner THEN NULL ELSE lease_owner END,
             lease_until = CASE WHEN lease_owner = $owner THEN NULL ELSE lease_until END
           WHERE id = $sourceId`,
        )
        .run({
          finishedAt: run.startedAt + run.durationMs,
          succeeded: succeeded ? 1 : 0,
          hasValidators: input.validators === undefined ? 0 : 1,
          etag: input.validators?.etag ?? null,
          lastModified: input.validators?.lastModified ?? null,
          owner: input.leaseOwner,
          sourceId: run.sourceId,
        });
      if (input.importedFile !== undefined) {
        this.database
          .query("INSERT OR IGNORE INTO feed_source_files (source_id, name, size, modified_at, run_id) VALUES (?, ?, ?, ?, ?)")
          .run(run.sourceId, input.importedFile.name, input.importedFile.size, input.importedFile.modifiedAt, run.id);
      }
    });
  }

  async releaseFeedLease(sourceId: string, owner: string): Promise<void> {
    this.write(() =>
      this.database.query("UPDATE feed_sources SET lease_owner = NULL, lease_until = NULL WHERE id = ? AND lease_owner = ?").run(sourceId, owner),
    );
  }

  async renewFeedLease(input: { id: string; owner: string; now: number; leaseMs: number }): Promise<boolean> {
    return this.write(
      () =>
        this.database.query("UPDATE feed_sources SET lease_until = ? WHERE id = ? AND lease_owner = ?").run(input.now + input.leaseMs, input.id, input.owner)
          .changes === 1,
    );
  }

  async listFeedRuns(sourceId: string, query: { limit: number; after?: string }): Promise<Page<FeedRun>> {
    const rows = this.database
      .query<FeedRun & { rejected: string }, [string, string | null, string | null, number]>(
        `${FEED_RUN_SELECT} WHERE source_id = ? AND (? IS NULL OR id < ?) ORDER BY id DESC LIMIT ?`,
      )
      .all(sourceId, query.after ?? null, query.after ?? null, query.limit + 1);
    return page(
      rows.map((row) => ({ ...row, rejected: JSON.parse(row.rejected) as FeedRun["rejected"] })),
      query.limit,
    );
  }

  async hasImportedFeedFile(sourceId: string, file: { name: string; size: number; modifiedAt: number }): Promise<boolean> {
    return (
      this.database
        .query("SELECT 1 FROM feed_source_files WHERE source_id = ? AND name = ? AND size = ? AND modified_at = ?")
        .get(sourceId, file.name, file.size, file.modifiedAt) !== null
    );
  }

  async insertFeedToken(token: NewFeedToken): Promise<FeedTokenRecord> {
    this.write(() =>
      this.database
        .query("INSERT INTO feed_tokens (id, source_id, scope, name, secret_hash, created_at) VALUES ($id, $sourceId, $scope, $name, $secretHash, $createdAt)")
        .run({ ...token }),
    );
    const { secretHash: _secret, ...record } = token;
    return { ...record, revokedAt: null, lastUsedAt: null };
  }

  async findFeedTokenCredential(id: string): Promise<FeedTokenCredential | null> {
    return this.database
      .query<FeedTokenCredential, [string]>(
        "SELECT id, source_id AS sourceId, scope, secret_hash AS secretHash, revoked_at AS revokedAt FROM feed_tokens WHERE id = ?",
      )
      .get(id);
  }

  async listFeedTokens(): Promise<FeedTokenRecord[]> {
    return this.database.query<FeedTokenRecord, []>(`${FEED_TOKEN_SELECT} ORDER BY id`).all();
  }

  async revokeFeedToken(id: string, now: number): Promise<FeedTokenRecord | null> {
    return this.write(() => {
      const changed = this.database.query("UPDATE feed_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL").run(now, id).changes;
      return changed === 0 ? null : this.database.query<FeedTokenRecord, [string]>(`${FEED_TOKEN_SELECT} WHERE id = ?`).get(id);
    });
  }

  async feedFreshness(freshSince: number): Promise<SourceFreshness[]> {
    return this.database
      .query<SourceFreshness, [number]>(
        "SELECT source_id AS sourceId, count(*) AS offers, count(*) FILTER (WHERE observed_at >= ?) AS freshOffers FROM offers WHERE source_id IS NOT NULL GROUP BY source_id",
      )
      .all(freshSince);
  }
}
