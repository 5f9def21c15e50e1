import { parseArgs } from "node:util";
import { type Command, output } from "../command";

export const migrateCommand: Command = {
  name: "migrate",
  summary: "Apply pending database migrations",
  usage: "migrate [--json]",
  async run(context) {
    const { values } = parseArgs({ args: context.args, options: { json: { type: "boolean", default: false } } });
    const store = await context.store();
    output(context, values.json === true, { migrated: true, dialect: store.dialect }, `database is up to date (${store.dialect})`);
  },
};
