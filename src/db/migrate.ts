import type { Database } from "bun:sqlite";
import { drizzle } from "drizzle-orm/bun-sqlite";
import type { MigrationMeta } from "drizzle-orm/migrator";
import { sqliteMigrations } from "../../drizzle/embedded";
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

/** Applies pending migrations (drizzle's own bookkeeping table), in one transaction. */
export function applySQLiteMigrations(database: Database): void {
  const db = drizzle(database);
  // drizzle exposes migrate() only for a folder; its dialect takes the parsed records directly.
  const internals = db as unknown as { dialect: { migrate(m: MigrationMeta[], s: unknown, c: object): void }; session: unknown };
  internals.dialect.migrate(toMigrationMeta(sqliteMigrations), internals.session, { migrationsTable: "__drizzle_migrations" });
}
