import { resolve } from "node:path";
import { backupSQLite } from "../../db/sqlite-backup";
import { sqlitePathFromURL } from "../../db/sqlite-store";
import { type Command, output, UsageError, parseCommandArgs, progressLine } from "../command";

export const backupCommand: Command = {
  name: "backup",
  summary: "Write a consistent copy of the SQLite database, safe while serve runs (PostgreSQL: use pg_dump)",
  usage: "backup FILE [--json]",
  details:
    "FILE must not exist. The copy is checked (integrity, ledger) before it gets its name.\n" +
    "Restore: stop serve, remove the old database file and its -wal and -shm files, copy FILE in its place, start serve.",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "backup", {});
    const file = positionals[0];
    if (file === undefined) throw new UsageError("backup needs a FILE to write");
    const { databaseUrl } = context.config;
    if (!databaseUrl.startsWith("sqlite:")) {
      throw new UsageError('backup copies SQLite databases; for PostgreSQL use pg_dump, e.g. pg_dump --format=custom --file=FILE "$DATABASE_URL"');
    }
    const source = sqlitePathFromURL(databaseUrl);
    if (source === ":memory:") throw new UsageError("an in-memory database has nothing to back up");
    // VACUUM INTO runs as one call: the line says what is under way until it returns.
    const progress = progressLine(context, values.json === true);
    progress.update(`backing up ${source} to ${resolve(file)}…`);
    let report: ReturnType<typeof backupSQLite>;
    try {
      report = backupSQLite(source, resolve(file));
    } finally {
      progress.done();
    }
    const rows = Object.entries(report.tables)
      .map(([table, count]) => `${table} ${count}`)
      .join(", ");
    output(
      context,
      values.json === true,
      report,
      `backup written to ${report.file} (${report.bytes} bytes, ${report.durationMs} ms, ledger checked for ${report.organizationsChecked} organization(s))\n${rows}`,
    );
  },
};
