import postgres from "postgres";

/**
 * Small on purpose: postgres.js pipelines queries onto busy connections once the pool is used up, so
 * a few connections carry many look-ups, and each one fewer is a PostgreSQL backend fewer to wake per
 * query (on 2 cores, 10 connections cost a billed look-up 112 µs of PostgreSQL CPU, 4 cost 82 µs).
 */
const DEFAULT_POOL_SIZE = 4;
/** The longest pause between two attempts to connect again. */
const RECONNECT_BACKOFF_MAX_S = 0.5;

/**
 * A postgres.js connection pool for DATABASE_URL. `?max=N` sets the pool size (default 4), and
 * any other query parameter is sent as a run-time setting at connect, e.g. `?search_path=tenant_a`.
 */
export function openPostgresClient(databaseUrl: string, options: { max?: number; settings?: Record<string, string>; driver?: DriverHooks } = {}): postgres.Sql {
  const url = new URL(databaseUrl);
  const max = options.max ?? poolSize(url.searchParams.get("max"));
  url.searchParams.delete("max");
  return postgres(url.toString(), {
    max,
    // CREATE … IF NOT EXISTS and friends report notices; they are not worth a log line.
    onnotice: () => {},
    // Seconds before connecting again after a lost or refused connection. postgres.js's own grows to
    // 20 s, so an instance could stay without its database for that long after PostgreSQL is back.
    backoff: (retries: number) => Math.min(0.025 * 2 ** retries, RECONNECT_BACKOFF_MAX_S),
    connection: { application_name: "price-service", ...options.settings },
    ...options.driver,
  });
}

/** Options postgres.js reads but does not type: a connection that never retires, with its notifications and its end reported. */
export interface DriverHooks {
  max_lifetime: null;
  onnotify(channel: string, payload: string): void;
  onclose(connectionId: number): void;
}

function poolSize(raw: string | null): number {
  if (raw === null) return DEFAULT_POOL_SIZE;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new Error(`DATABASE_URL: max must be a whole number of at least 1, got "${raw}"`);
  return Number(raw);
}

/**
 * The group commit's own connection (one, as its transactions are sent as separate pipelined
 * queries). Generic plans only: PostgreSQL planned the debit statement again at every execution (a
 * custom plan per batch, 6 % of the debit backend's CPU in `perf`), as it keeps custom plans while
 * their estimated cost stays below the generic plan's; the generic plans use the same indexes.
 * A debit holds its rows' locks while this instance computes it, so an instance that freezes there
 * (a stopped process, a paused machine) loses its transaction after a few seconds, rather than
 * keeping every other instance's debits of those organizations waiting.
 */
export function openDebitConnection(databaseUrl: string, options: { frozenAfter?: string } = {}): postgres.Sql {
  return openPostgresClient(databaseUrl, {
    max: 1,
    settings: { plan_cache_mode: "force_generic_plan", idle_in_transaction_session_timeout: options.frozenAfter ?? "5s" },
  });
}
