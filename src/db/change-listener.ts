// What an instance keeps in memory of shared rows on PostgreSQL (API key credentials, the catalog
// version) stays true through the database's change notifications: triggers of migration 0017
// notify every change of a key's credential and every import's catalog version, on one channel,
// with the schema they happened in. While the listening connection is down nothing may be kept
// (notifications sent meanwhile are lost): `live` is false, and every reconnection starts empty.
import type postgres from "postgres";
import { openPostgresClient } from "./postgres-client";

export const CHANGES_CHANNEL = "price_service_changes";

const RECONNECT_MS = 1_000;

/** How long caughtUp waits for its own notification before it takes the connection for lost. */
const SYNC_PATIENCE_MS = 2_000;

/** What the listener tells the memories it keeps true. */
export interface ChangeHandlers {
  /** A key's credential changed (`keyHash`: the row's hash before the change). */
  keyChanged(keyHash: string): void;
  /**
   * An organization's buckets changed: by another instance's debit, which says what they hold
   * after it (`spendable`), or otherwise (a grant, a refund, an expiry…: read them again).
   */
  creditsChanged(organizationId: string, spendable: number | null): void;
  /** An import committed catalog version `version`. */
  catalogMoved(version: number): void;
  /** Notifications may have been missed: everything remembered goes. */
  forgetAll(): void;
}

export class ChangeListener {
  /** True while every change is being heard: only then may anything be remembered. */
  private listening = false;
  /** Moves at every key change heard and every loss of the connection: a key read begun under an older epoch may be stale. */
  private changes = 0;
  /** Moves at every balance change heard and every loss of the connection, for balance reads likewise. */
  private creditChanges = 0;
  /** What this instance's own debits sign their notices with (it knows what they did already). */
  readonly instanceId = crypto.randomUUID();
  private connection: postgres.Sql | null = null;
  private starting: Promise<void> | null = null;
  private reconnect: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private schema: string | null = null;
  private readonly waiting = new Map<string, () => void>();

  /** `databaseUrl` null: never listens, so nothing is ever remembered. */
  constructor(
    private readonly databaseUrl: string | null,
    private readonly handlers: ChangeHandlers,
  ) {}

  /** Whether a key read begun at `epoch` may be remembered: the listener heard everything since. */
  canRemember(epoch: number): boolean {
    return this.listening && epoch === this.changes;
  }

  /** This instance changed balances: balance reads begun before may not be remembered. */
  noteCreditsChange(): void {
    this.creditChanges++;
  }

  get creditsEpoch(): number {
    return this.creditChanges;
  }

  /** Whether a balance read begun at `epoch` may be remembered. */
  canRememberCredits(epoch: number): boolean {
    return this.listening && epoch === this.creditChanges;
  }

  /** This instance changed something it may remember: reads begun before may not be remembered. */
  noteChange(): void {
    this.changes++;
  }

  get epoch(): number {
    return this.changes;
  }

  get live(): boolean {
    return this.listening;
  }

  /** Starts listening (once; later calls return at once): until it listens, nothing is remembered. */
  start(): void {
    if (this.databaseUrl === null || this.closed || this.connection !== null || this.starting !== null || this.reconnect !== null) return;
    this.starting = this.listen(this.databaseUrl).finally(() => (this.starting = null));
  }

  private async listen(databaseUrl: string): Promise<void> {
    // One connection that never idles out, whose notifications and end are reported here.
    const connection: postgres.Sql = openPostgresClient(databaseUrl, {
      max: 1,
      driver: {
        max_lifetime: null,
        onnotify: (channel, payload) => this.heard(channel, payload),
        onclose: () => this.lost(connection),
      },
    });
    try {
      const [{ schema }] = await connection<[{ schema: string }]>`SELECT current_schema() AS schema`;
      await connection.unsafe(`LISTEN ${CHANGES_CHANNEL}`);
      if (this.closed) return void (await connection.end({ timeout: 1 }));
      this.schema = schema;
      this.connection = connection;
      this.handlers.forgetAll();
      this.changes++;
      this.creditChanges++;
      this.listening = true;
    } catch {
      await connection.end({ timeout: 1 }).catch(() => {});
      this.retryLater();
    }
  }

  private lost(connection: postgres.Sql): void {
    if (this.connection !== connection) return;
    this.connection = null;
    this.listening = false;
    this.changes++;
    this.creditChanges++;
    this.handlers.forgetAll();
    void connection.end({ timeout: 1 }).catch(() => {});
    this.retryLater();
  }

  private retryLater(): void {
    if (this.closed || this.reconnect !== null) return;
    this.reconnect = setTimeout(() => {
      this.reconnect = null;
      this.start();
    }, RECONNECT_MS);
    this.reconnect.unref?.();
  }

  private heard(channel: string, payload: string): void {
    if (channel !== CHANGES_CHANNEL) return;
    const [schema, kind, value, spendable, instance] = payload.split(" ", 5) as [string, string, string, string?, string?];
    if (schema !== this.schema) return;
    if (kind === "key") {
      this.changes++;
      this.handlers.keyChanged(value);
    } else if (kind === "credits") {
      if (instance === this.instanceId) return;
      this.creditChanges++;
      this.handlers.creditsChanged(value, spendable === undefined ? null : Number(spendable));
    } else if (kind === "catalog") this.handlers.catalogMoved(Number(value));
    else if (kind === "sync") this.waiting.get(value)?.();
  }

  /**
   * Resolves once every change committed before the call has been heard (or at once when nothing
   * is listening, as nothing is remembered then): notifications arrive in commit order, so hearing
   * one sent now means hearing all before it.
   */
  async caughtUp(sql: postgres.Sql): Promise<void> {
    if (!this.listening || this.schema === null) return;
    const connection = this.connection;
    const token = crypto.randomUUID();
    const heard = new Promise<boolean>((resolve) => this.waiting.set(token, () => resolve(true)));
    await sql`SELECT pg_notify(${CHANGES_CHANNEL}, ${`${this.schema} sync ${token}`})`;
    const inTime = await Promise.race([heard, Bun.sleep(SYNC_PATIENCE_MS).then(() => false)]);
    this.waiting.delete(token);
    // Not heard: the connection is gone without having said so; nothing remembered can be trusted.
    if (!inTime && connection !== null) this.lost(connection);
  }

  /** Drops the connection as a network failure would (for tests and the simulation's faults). */
  async dropConnection(): Promise<void> {
    const connection = this.connection;
    if (connection === null) return;
    await connection`SELECT pg_terminate_backend(pg_backend_pid())`.catch(() => {});
    this.lost(connection);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnect !== null) clearTimeout(this.reconnect);
    await this.starting;
    const connection = this.connection;
    this.connection = null;
    this.listening = false;
    await connection?.end({ timeout: 1 });
  }
}
