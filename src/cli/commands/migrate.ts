import { copySQLiteToPostgres } from "../../db/copy-to-postgres";
import { PostgresStore } from "../../db/postgres-store";
import { SQLiteStore } from "../../db/sqlite-store";
import { type Command, output, UsageError, parseCommandArgs } from "../command";

export const migrateCommand: Command = {
  name: "migrate",
  createsDatabase: true,
  summary: "Apply pending database migrations, or copy a SQLite database into PostgreSQL (--to)",
  usage:
    "migrate [--json]\n  migrate --to postgres://… [--json]   (copies DATABASE_URL, a SQLite database, into an empty PostgreSQL database and verifies counts and balances)",
  async run(context) {
    const { values } = parseCommandArgs(context, "migrate", { to: { type: "string" } });
    const json = values.json === true;
    if (values.to !== undefined && !/^postgres(ql)?:\/\//.test(values.to)) throw new UsageError("--to must be a postgres:// URL");
    const store = await context.store();
    if (values.to === undefined) {
      output(context, json, { migrated: true, dialect: store.dialect }, `database is up to date (${store.dialect})`);
      return;
    }
    if (!(store instanceof SQLiteStore)) throw new UsageError("migrate --to copies a SQLite database: DATABASE_URL must be sqlite:PATH");

    const target = await PostgresStore.open(values.to);
    try {
      const report = await copySQLiteToPostgres(store.connection, target.connection);
      const width = Math.max(5, ...report.tables.map((row) => row.table.length));
      const lines = [
        `${"table".padEnd(width)}  ${"sqlite".padStart(9)}  ${"postgres".padStart(9)}`,
        ...report.tables.map((row) => `${row.table.padEnd(width)}  ${String(row.sqlite).padStart(9)}  ${String(row.postgres).padStart(9)}`),
        `balances of ${report.organizations} organization(s) match: running ledger balance, ledger sum, credits in buckets`,
      ];
      output(context, json, report, lines.join("\n"));
    } finally {
      await target.close();
    }
  },
};
