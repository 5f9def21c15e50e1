import type { Database } from "bun:sqlite";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/bun-sqlite";
import type { MigrationMeta } from "drizzle-orm/migrator";
import { drizzle as drizzlePostgres } from "drizzle-orm/postgres-js";
import { postgresMigrations, sqliteMigrations } from "../../drizzle/embedded";
import { openPostgresClient } from "./postgres-client";
import { sha256 } from "@oslojs/crypto/sha2";
import { encodeHexLowerCase } from "@oslojs/encoding";

export interface EmbeddedMigration {
  tag: string;
  when: number;
  breakpoints: boolean;
  sql: string;
}

/** The same records drizzle's folder reader builds, from migrations embedded in the executable. */
export function toMigrationMeta(migrations: EmbeddedMigration[]): MigrationMeta[] {
  return migrations.map((migration) => ({
    sql: migration.sql.split("--> statement-breakpoint"),
    bps: migration.breakpoints,
    folderMillis: migration.when,
    hash: encodeHexLowerCase(sha256(new TextEncoder().encode(migration.sql))),
  }));
}

/** Applies pending migrations (drizzle's own bookkeeping table), in one transaction; `migrations` are all of them but in tests of one migration. */
export function applySQLiteMigrations(database: Database, migrations: EmbeddedMigration[] = sqliteMigrations): void {
  const db = drizzle(database);
  // drizzle exposes migrate() only for a folder; its dialect takes the parsed records directly.
  const internals = db as unknown as { dialect: { migrate(m: MigrationMeta[], s: unknown, c: object): void }; session: unknown };
  internals.dialect.migrate(toMigrationMeta(migrations), internals.session, { migrationsTable: "__drizzle_migrations" });
}

/** First key of the migration advisory lock ("pric"); the second is the schema, so schemas migrate independently. */
const MIGRATION_LOCK_NAMESPACE = 0x70726963;

/**
 * Applies pending PostgreSQL migrations under a session advisory lock, so several instances starting
 * together migrate once: the first takes the lock and migrates, the others wait for it, then find
 * nothing pending. Tables and drizzle's bookkeeping table go into the current schema (the first of
 * `search_path`), so one database can hold several isolated deployments or test runs.
 */
export async function applyPostgresMigrations(databaseUrl: string, migrations: EmbeddedMigration[] = postgresMigrations): Promise<void> {
  // One connection: a session advisory lock belongs to the connection that took it.
  const client = openPostgresClient(databaseUrl, { max: 1 });
  try {
    const [current] = await client<Array<{ schema: string | null }>>`SELECT current_schema() AS schema`;
    const schema = current?.schema ?? null;
    if (schema === null) throw new Error("DATABASE_URL: search_path names no existing schema");
    const db = drizzlePostgres(client);
    await db.execute(sql`SELECT pg_advisory_lock(${MIGRATION_LOCK_NAMESPACE}, hashtext(${schema}))`);
    try {
      const internals = db as unknown as { dialect: { migrate(m: MigrationMeta[], s: unknown, c: object): Promise<void> }; session: unknown };
      const meta = toMigrationMeta(migrations).map((m) => ({ ...m, sql: m.sql.map(resolveThroughSearchPath) }));
      await internals.dialect.migrate(meta, internals.session, { migrationsTable: "__drizzle_migrations", migrationsSchema: schema });
    } finally {
      await db.execute(sql`SELECT pg_advisory_unlock(${MIGRATION_LOCK_NAMESPACE}, hashtext(${schema}))`);
    }
  } finally {
    await client.end({ timeout: 5 });
  }
}

// drizzle-kit writes foreign keys as REFERENCES "public"."table"; dropping the qualifier lets them
// resolve in the schema the tables are created in (the current one), whatever its name.
function resolveThroughSearchPath(statement: string): string {
  return statement.replaceAll('REFERENCES "public".', "REFERENCES ");
}
