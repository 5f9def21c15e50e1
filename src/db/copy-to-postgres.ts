import type { Database } from "bun:sqlite";
import { getTableColumns, is, sql } from "drizzle-orm";
import { drizzle as drizzleSQLite } from "drizzle-orm/bun-sqlite";
import { getTableConfig as getPgTableConfig, PgTable } from "drizzle-orm/pg-core";
import { drizzle as drizzlePostgres } from "drizzle-orm/postgres-js";
import { getTableConfig as getSQLiteTableConfig, SQLiteTable } from "drizzle-orm/sqlite-core";
import type postgres from "postgres";
import * as postgresSchema from "./schema/postgres";
import * as sqliteSchema from "./schema/sqlite";

export interface CopyReport {
  tables: Array<{ table: string; sqlite: number; postgres: number }>;
  /** Organizations whose ledger balance, ledger sum and bucket credits were compared and found equal. */
  organizations: number;
}

interface TablePair {
  name: string;
  sqlite: SQLiteTable;
  postgres: PgTable;
  /** PostgreSQL property name → SQLite property name of the same database column. */
  columns: Array<[string, string]>;
  dependsOn: string[];
}

/** Rows read and inserted per statement. */
const COPY_BATCH = 1000;

/**
 * Copies every table of a SQLite database into an empty PostgreSQL database that already has the
 * schema, in one PostgreSQL transaction, then checks row counts and each organization's balances
 * on both sides before committing. Any difference, a non-empty target, or a SQLite table that the
 * PostgreSQL schema lacks stops the copy with nothing written.
 */
export async function copySQLiteToPostgres(source: Database, target: postgres.Sql): Promise<CopyReport> {
  const pairs = tablePairs();
  const known = new Set(pairs.map((pair) => pair.name));
  const present = source
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> '__drizzle_migrations'")
    .all()
    .map((row) => row.name);
  const unknown = present.filter((name) => !known.has(name));
  if (unknown.length > 0) throw new Error(`the SQLite database has tables the PostgreSQL schema does not know: ${unknown.join(", ")}`);

  const from = drizzleSQLite(source);
  const to = drizzlePostgres(target);
  // One read transaction: a consistent snapshot even while `serve` keeps writing to the file.
  source.exec("BEGIN");
  try {
    return await to.transaction(async (tx) => {
      const filled: string[] = [];
      for (const pair of pairs) {
        const [row] = await tx.select({ count: sql<number>`count(*)`.mapWith(Number) }).from(pair.postgres);
        if (row!.count > 0) filled.push(`${pair.name} (${row!.count} row${row!.count === 1 ? "" : "s"})`);
      }
      if (filled.length > 0) throw new Error(`the target database is not empty: ${filled.join(", ")}`);

      // The copied history is the history: the trigger that writes it for new offers must not write it
      // again for the copied ones (transactional DDL: undone with the copy if it fails).
      await tx.execute(sql`ALTER TABLE offers DISABLE TRIGGER offers_price_history`);
      // Likewise the queue of watched changes: what is queued is copied, the copied offers queue nothing.
      await tx.execute(sql`ALTER TABLE offers DISABLE TRIGGER offers_watch_insert`);
      await tx.execute(sql`ALTER TABLE offers DISABLE TRIGGER offers_watch_update`);
      const tables: CopyReport["tables"] = [];
      for (const pair of pairs) {
        const columns = getTableColumns(pair.sqlite);
        let lastRowId = 0;
        for (;;) {
          const rows = from
            .select({ ...columns, copyRowId: sql<number>`rowid` })
            .from(pair.sqlite)
            .where(sql`rowid > ${lastRowId}`)
            .orderBy(sql`rowid`)
            .limit(COPY_BATCH)
            .all() as Array<Record<string, unknown> & { copyRowId: number }>;
          if (rows.length === 0) break;
          lastRowId = rows[rows.length - 1]!.copyRowId;
          // The history's and the watch queue's ids are identity columns that PostgreSQL numbers itself; rows are copied in order.
          const copied =
            pair.name === "offer_price_history" || pair.name === "watch_changes" ? pair.columns.filter(([postgresKey]) => postgresKey !== "id") : pair.columns;
          const values = rows.map((row) => Object.fromEntries(copied.map(([postgresKey, sqliteKey]) => [postgresKey, row[sqliteKey]])));
          await tx.insert(pair.postgres).values(values);
        }
        const [sqliteCount] = from.select({ count: sql<number>`count(*)` }).from(pair.sqlite).all();
        const [postgresCount] = await tx.select({ count: sql<number>`count(*)`.mapWith(Number) }).from(pair.postgres);
        tables.push({ table: pair.name, sqlite: sqliteCount!.count, postgres: postgresCount!.count });
      }
      await tx.execute(sql`ALTER TABLE offers ENABLE TRIGGER offers_price_history`);
      await tx.execute(sql`ALTER TABLE offers ENABLE TRIGGER offers_watch_insert`);
      await tx.execute(sql`ALTER TABLE offers ENABLE TRIGGER offers_watch_update`);
      const different = tables.filter((row) => row.sqlite !== row.postgres);
      if (different.length > 0)
        throw new Error(`row counts differ after the copy: ${different.map((row) => `${row.table} ${row.sqlite} → ${row.postgres}`).join(", ")}`);

      const sqliteBalances = source.query<BalanceRow, []>(BALANCES).all().map(normalizeBalance);
      const postgresBalances = (await tx.execute<BalanceRow>(sql.raw(BALANCES))).map(normalizeBalance);
      if (JSON.stringify(sqliteBalances) !== JSON.stringify(postgresBalances)) throw new Error("organization balances differ after the copy");
      return { tables, organizations: sqliteBalances.length };
    });
  } finally {
    source.exec("COMMIT");
  }
}

type BalanceRow = { id: string; ledger: number | string; ledger_sum: number | string; bucket_credits: number | string };

// Valid in both dialects: per organization, the running ledger sum, the sum of its ledger rows and
// the credits left in its buckets.
const BALANCES = `SELECT o.id,
  o.ledger_balance AS ledger,
  CAST((SELECT coalesce(sum(t.amount), 0) FROM credit_transactions t WHERE t.organization_id = o.id) AS BIGINT) AS ledger_sum,
  CAST((SELECT coalesce(sum(b.remaining), 0) FROM credit_buckets b WHERE b.organization_id = o.id) AS BIGINT) AS bucket_credits
FROM organizations o ORDER BY o.id`;

function normalizeBalance(row: BalanceRow) {
  return { id: row.id, ledger: Number(row.ledger), ledgerSum: Number(row.ledger_sum), bucketCredits: Number(row.bucket_credits) };
}

/** The tables of both schemas, matched by export name, parents before the tables that reference them. */
function tablePairs(): TablePair[] {
  const pairs = new Map<string, TablePair>();
  for (const [exportName, sqliteTable] of Object.entries(sqliteSchema)) {
    if (!is(sqliteTable, SQLiteTable)) continue;
    const postgresTable = (postgresSchema as Record<string, unknown>)[exportName];
    const sqliteConfig = getSQLiteTableConfig(sqliteTable);
    if (!is(postgresTable, PgTable)) throw new Error(`table ${sqliteConfig.name} has no PostgreSQL counterpart in src/db/schema/postgres.ts`);
    const postgresConfig = getPgTableConfig(postgresTable);
    const sqliteKeyOfColumn = new Map(Object.entries(getTableColumns(sqliteTable)).map(([key, column]) => [column.name, key]));
    const columns = Object.entries(getTableColumns(postgresTable)).map(([key, column]): [string, string] => [key, sqliteKeyOfColumn.get(column.name) ?? ""]);
    if (postgresConfig.name !== sqliteConfig.name || columns.some(([, sqliteKey]) => sqliteKey === "") || columns.length !== sqliteKeyOfColumn.size) {
      throw new Error(`table ${sqliteConfig.name} differs between the SQLite and PostgreSQL schemas`);
    }
    const dependsOn = postgresConfig.foreignKeys
      .map((key) => getPgTableConfig(key.reference().foreignTable).name)
      .filter((name) => name !== postgresConfig.name);
    pairs.set(postgresConfig.name, { name: postgresConfig.name, sqlite: sqliteTable, postgres: postgresTable, columns, dependsOn });
  }
  const ordered: TablePair[] = [];
  const visit = (pair: TablePair, path: string[]) => {
    if (ordered.includes(pair)) return;
    if (path.includes(pair.name)) throw new Error(`foreign keys form a cycle: ${[...path, pair.name].join(" → ")}`);
    for (const parent of pair.dependsOn) visit(pairs.get(parent)!, [...path, pair.name]);
    ordered.push(pair);
  };
  for (const pair of pairs.values()) visit(pair, []);
  return ordered;
}
