// What an instance keeps in memory of shared rows on PostgreSQL (API key credentials, the catalog
// version, balances) stays true through the database's change notifications: triggers of migration
// 0017 notify every change of a key's credential, every import's catalog version and every change of
// an organization's buckets outside a debit, on one channel, with the schema of the tables they
// changed. Nothing may be remembered unless every change is heard: while the listening connection
// is down, and from the moment it has not heard its own heartbeat for HEARTBEAT_PATIENCE_MS (a
// connection can die without saying so, or a pooler can swallow notifications), `live` is false;
// every (re)connection starts empty and counts only once it has heard itself.
import type postgres from "postgres";
import { openPostgresClient } from "./postgres-client";

export const CHANGES_CHANNEL = "price_service_changes";

const RECONNECT_MS = 1_000;

/** How often the listener notifies itself, and how long it may go without hearing anything before it counts as deaf. */
const HEARTBEAT_MS = 1_000;
const HEARTBEAT_PATIENCE_MS = 3_000;

/** What the listener tells the memories it keeps true. */
export interface ChangeHandlers {
  /** A key's credential changed. */
  keyChanged(keyId: string): void;
  /**
   * An organization's buckets changed: by another instance's debit, which says what they hold after
   * it (`spendable`), or otherwise (a grant, a refund, an expiry…: null, read them again).
   */
  creditsChanged(organizationId: string, spendable: number | null): void;
  /** Another instance found too few credits in an organization's buckets: leases of it go back. */
  leasesWanted(organizationId: string): void;
  /** An import committed catalog version `version`. */
  catalogMoved(version: number): void;
  /** Notifications may have been missed: everything remembered goes. */
  forgetAll(): void;
}

export class ChangeListener {
  /** True while every change is being heard: only then may anything be remembered. */
  private listening = false;
  /** When anything of this schema was last heard (performance.now()). */
  private lastHeard = Number.NEGATIVE_INFINITY;
  /** Moves at every key change heard and every loss of the connection: a key read begun under an older epoch may be stale. */
  private changes = 0;
  /** Moves at every balance change heard or made here and every loss of the connection, for balance reads likewise. */
  private creditChanges = 0;
  private connection: postgres.Sql | null = null;
  private starting: Promise<void> | null = null;
  private reconnect: ReturnType<typeof setTimeout> | null = null;
  private heartbeat: ReturnType<typeof setInterval> | null = null;
  private closed = false;
  private schema: string | null = null;
  private readonly waiting = new Map<string, () => void>();
  /** What this instance's own debits sign their notices with (it knows what they did already). */
  readonly instanceId = crypto.randomUUID();

  /** `databaseUrl` null: never listens, so nothing is ever remembered. */
  constructor(
    private readonly databaseUrl: string | null,
    private readonly handlers: ChangeHandlers,
  ) {}

  get live(): boolean {
    return this.listening && performance.now() - this.lastHeard < HEARTBEAT_PATIENCE_MS;
  }

  get epoch(): number {
    return this.changes;
  }

  get creditsEpoch(): number {
    return this.creditChanges;
  }

  /** Whether a key read begun at `epoch` may be remembered: the listener heard everything since. */
  canRemember(epoch: number): boolean {
    return this.live && epoch === this.changes;
  }

  /** Whether a balance read begun at `epoch` may be remembered. */
  canRememberCredits(epoch: number): boolean {
    return this.live && epoch === this.creditChanges;
  }

  /** This instance changed a key: key reads begun before may not be remembered. */
  noteChange(): void {
    this.changes++;
  }

  /** This instance changed balances: balance reads begun before may not be remembered. */
  noteCreditsChange(): void {
    this.creditChanges++;
  }

  /** Starts listening (once; later calls return at once): until it listens, nothing is remembered. */
  start(): void {
    if (this.databaseUrl === null || this.closed || this.connection !== null || this.starting !== null || this.reconnect !== null) return;
    this.starting = this.listen(this.databaseUrl).finally(() => (this.starting = null));
  }

  private async listen(databaseUrl: string): Promise<void> {
    // One connection that never retires, whose notifications and end are reported here.
    const connection: postgres.Sql = openPostgresClient(databaseUrl, {
      max: 1,
      driver: { max_lifetime: null, onnotify: (channel, payload) => this.heard(channel, payload), onclose: () => this.lost(connection) },
    });
    try {
      // The schema the triggers name: that of the tables, whatever the search_path says first.
      const [{ schema }] = await connection<[{ schema: string }]>`
        SELECT n.nspname AS schema FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'api_keys'::regclass`;
      this.schema = schema;
      await connection.unsafe(`LISTEN ${CHANGES_CHANNEL}`);
      this.connection = connection;
      // It counts once it hears itself: a pooler that drops notifications never gets here.
      if (this.closed || !(await this.hearsItself(connection))) throw new Error("the listener does not hear its own notifications");
      this.handlers.forgetAll();
      this.changes++;
      this.creditChanges++;
      this.listening = true;
      this.heartbeat ??= setInterval(() => this.beat(), HEARTBEAT_MS);
      this.heartbeat.unref?.();
    } catch {
      this.connection = null;
      await connection.end({ timeout: 1 }).catch(() => {});
      this.retryLater();
    }
  }

  /** Notifies itself through `sql` and waits to hear it: true when heard within the patience. */
  private async hearsItself(sql: postgres.Sql): Promise<boolean> {
    const token = crypto.randomUUID();
    const heard = new Promise<boolean>((resolve) => this.waiting.set(token, () => resolve(true)));
    try {
      await sql`SELECT pg_notify(${CHANGES_CHANNEL}, ${`${this.schema} sync ${token}`})`;
      return await Promise.race([heard, Bun.sleep(HEARTBEAT_PATIENCE_MS).then(() => false)]);
    } catch {
      return false;
    } finally {
      this.waiting.delete(token);
    }
  }

  /** Every HEARTBEAT_MS: a listener that heard nothing for too long is taken for lost; a live one notifies itself. */
  private beat(): void {
    const connection = this.connection;
    if (connection === null || !this.listening) return;
    if (this.live) void connection`SELECT pg_notify(${CHANGES_CHANNEL}, ${`${this.schema} beat`})`.catch(() => {});
    else this.lost(connection);
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
    const [schema, kind, value = "", spendable, instance] = payload.split(" ", 5) as [string, string, string?, string?, string?];
    if (schema !== this.schema) return;
    this.lastHeard = performance.now();
    if (kind === "key") {
      this.changes++;
      this.handlers.keyChanged(value);
    } else if (kind === "credits") {
      if (instance === this.instanceId) return;
      this.creditChanges++;
      this.handlers.creditsChanged(value, spendable === undefined ? null : Number(spendable));
    } else if (kind === "leases") this.handlers.leasesWanted(value);
    else if (kind === "catalog") this.handlers.catalogMoved(Number(value));
    else if (kind === "reset") {
      this.changes++;
      this.creditChanges++;
      this.handlers.forgetAll();
    } else if (kind === "sync") this.waiting.get(value)?.();
  }

  /**
   * Resolves once every change committed before the call has been heard (or at once when nothing
   * is remembered): notifications arrive in commit order, so hearing one sent now through `sql`
   * means hearing all before it. Not heard in time: the connection is taken for lost.
   */
  async caughtUp(sql: postgres.Sql): Promise<void> {
    const connection = this.connection;
    if (!this.listening || connection === null) return;
    if (!(await this.hearsItself(sql))) this.lost(connection);
  }

  /** Asks every instance to give its leases of the organization back. */
  async wantLeasesBack(sql: postgres.Sql, organizationId: string): Promise<void> {
    if (this.schema !== null) await sql`SELECT pg_notify(${CHANGES_CHANNEL}, ${`${this.schema} leases ${organizationId}`})`;
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
    if (this.heartbeat !== null) clearInterval(this.heartbeat);
    const connection = this.connection;
    this.connection = null;
    this.listening = false;
    await connection?.end({ timeout: 1 }).catch(() => {});
    await this.starting;
  }
}
