import { Database } from "bun:sqlite";
import { existsSync, renameSync, rmSync, statSync } from "node:fs";

export interface BackupReport {
  file: string;
  bytes: number;
  durationMs: number;
  /** Rows per table in the copy. */
  tables: Record<string, number>;
  /** Organizations whose ledger sum, running balance and bucket credits all agree in the copy. */
  organizationsChecked: number;
}

export class BackupError extends Error {}

// Per organization: running balance = sum of its ledger = credits left in its buckets (reservations
// are held in memory by `serve`, never in the file). A torn copy would break this.
const LEDGER_MISMATCHES = `
  SELECT o.id FROM organizations o
  WHERE o.ledger_balance != (SELECT coalesce(sum(t.amount), 0) FROM credit_transactions t WHERE t.organization_id = o.id)
     OR o.ledger_balance != (SELECT coalesce(sum(b.remaining), 0) FROM credit_buckets b WHERE b.organization_id = o.id)`;

/**
 * A consistent online backup with VACUUM INTO: SQLite copies one read snapshot (writers in WAL mode
 * carry on) into a compact, self-contained file with no -wal beside it. The copy is written under a
 * temporary name, checked (quick_check, the ledger invariant), then renamed, so a failed or
 * interrupted backup never leaves a file that looks like a good one.
 */
export function backupSQLite(sourcePath: string, targetPath: string): BackupReport {
  if (!existsSync(sourcePath)) throw new BackupError(`no database at ${sourcePath}`);
  if (existsSync(targetPath)) throw new BackupError(`${targetPath} already exists; choose a new file name`);
  const startedAt = performance.now();
  const partial = `${targetPath}.partial-${process.pid}`;
  const source = new Database(sourcePath, { readwrite: true, create: false });
  try {
    source.exec("PRAGMA busy_timeout = 5000");
    source.query("VACUUM INTO ?").run(partial);
  } catch (error) {
    rmSync(partial, { force: true });
    throw new BackupError(`backup failed: ${error instanceof Error ? error.message : String(error)}`);
  } finally {
    source.close();
  }

  const copy = new Database(partial, { readonly: true });
  let tables: Record<string, number>;
  let organizationsChecked: number;
  try {
    const check = copy.query<{ quick_check: string }, []>("PRAGMA quick_check").all();
    if (check.length !== 1 || check[0]!.quick_check !== "ok")
      throw new BackupError(`the copy failed its integrity check: ${check.map((row) => row.quick_check).join("; ")}`);
    const names = copy.query<{ name: string }, []>("SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all();
    tables = Object.fromEntries(
      names.map(({ name }) => [name, copy.query<{ count: number }, []>(`SELECT count(*) AS count FROM "${name.replaceAll('"', '""')}"`).get()!.count]),
    );
    const mismatches = copy.query<{ id: string }, []>(LEDGER_MISMATCHES).all();
    if (mismatches.length > 0) throw new BackupError(`the copy's ledger does not add up for ${mismatches.map((row) => row.id).join(", ")}`);
    organizationsChecked = tables.organizations ?? 0;
  } catch (error) {
    copy.close();
    rmSync(partial, { force: true });
    throw error;
  }
  copy.close();
  renameSync(partial, targetPath);
  return { file: targetPath, bytes: statSync(targetPath).size, durationMs: Math.round(performance.now() - startedAt), tables, organizationsChecked };
}
