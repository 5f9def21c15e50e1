import postgres from "postgres";

const DEFAULT_POOL_SIZE = 10;

/**
 * A postgres.js connection pool for DATABASE_URL. `?max=N` sets the pool size (default 10), and
 * any other query parameter is sent as a run-time setting at connect, e.g. `?search_path=tenant_a`.
 */
export function openPostgresClient(databaseUrl: string, options: { max?: number } = {}): postgres.Sql {
  const url = new URL(databaseUrl);
  const max = options.max ?? poolSize(url.searchParams.get("max"));
  url.searchParams.delete("max");
  return postgres(url.toString(), {
    max,
    // CREATE … IF NOT EXISTS and friends report notices; they are not worth a log line.
    onnotice: () => {},
    connection: { application_name: "price-service" },
  });
}

function poolSize(raw: string | null): number {
  if (raw === null) return DEFAULT_POOL_SIZE;
  if (!/^\d+$/.test(raw) || Number(raw) < 1) throw new Error(`DATABASE_URL: max must be a whole number of at least 1, got "${raw}"`);
  return Number(raw);
}
