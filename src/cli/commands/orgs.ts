import { parseArgs } from "node:util";
import { toISO } from "../../lib/clock";
import { type Command, output, requireOption, UsageError } from "../command";

export const orgsCommand: Command = {
  name: "orgs",
  summary: "Create and list organizations",
  usage: "orgs create --name NAME [--json]\n  orgs list [--json]",
  async run(context) {
    const { values, positionals } = parseArgs({
      args: context.args,
      options: { name: { type: "string" }, json: { type: "boolean", default: false } },
      allowPositionals: true,
    });
    const store = await context.store();
    const json = values.json === true;
    switch (positionals[0]) {
      case "create": {
        const name = requireOption(values, "name");
        if (name.length > 200) throw new UsageError("--name must be at most 200 characters");
        const organization = await store.createOrganization({ name, now: Date.now() });
        output(context, json, { id: organization.id, name: organization.name }, `${organization.id}\t${organization.name}`);
        return;
      }
      case "list": {
        const organizations = await store.listOrganizations();
        const items = organizations.map((o) => ({ id: o.id, name: o.name, createdAt: toISO(o.createdAt) }));
        output(context, json, items, items.map((o) => `${o.id}\t${o.name}`).join("\n"));
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use create or list`);
    }
  },
};
