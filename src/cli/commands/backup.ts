import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { backupSQLite } from "../../db/sqlite-backup";
import { sqlitePathFromURL } from "../../db/sqlite-store";
import { type Command, output, UsageError } from "../command";

export const backupCommand: Command = {
  name: "backup",
  summary: "Write a consistent copy of the SQLite database, safe while serve runs (PostgreSQL: use pg_dump)",
  usage:
    "backup FILE [--json]\n\n" +
    "  FILE must not exist. The copy is checked (integrity, ledger) before it gets its name.\n" +
    "  Restore: stop serve, remove the old database file and its -wal and -shm files, copy FILE in its place, start serve.",
  async run(context) {
    const { values, positionals } = parseArgs({ args: context.args, options: { json: { type: "boolean", default: false } }, allowPositionals: true });
    const file = positionals[0];
    if (file === undefined) throw new UsageError("backup needs a FILE to write");
    const { databaseUrl } = context.config;
    if (!databaseUrl.startsWith("sqlite:")) {
      throw new UsageError('backup copies SQLite databases; for PostgreSQL use pg_dump, e.g. pg_dump --format=custom --file=FILE "$DATABASE_URL"');
    }
    const source = sqlitePathFromURL(databaseUrl);
    if (source === ":memory:") throw new UsageError("an in-memory database has nothing to back up");
    const report = backupSQLite(source, resolve(file));
    const rows = Object.entries(report.tables).map(([table, count]) => `${table} ${count}`).join(", ");
    output(context, values.json === true, report, `backup written to ${report.file} (${report.bytes} bytes, ${report.durationMs} ms, ledger checked for ${report.organizationsChecked} organization(s))\n${rows}`);
  },
};
