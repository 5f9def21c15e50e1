import { parseArgs } from "node:util";
import { SYSTEM_USER_ID } from "../../db/store";
import { createApiKey, keyJSON } from "../../modules/keys/service";
import { type Command, output, requireOption, UsageError } from "../command";

export const keysCommand: Command = {
  name: "keys",
  summary: "Create, list and revoke API keys",
  usage: "keys create --org ORG_ID --name NAME [--json]\n  keys list --org ORG_ID [--json]\n  keys revoke KEY_ID [--json]",
  async run(context) {
    const { values, positionals } = parseArgs({
      args: context.args,
      options: { org: { type: "string" }, name: { type: "string" }, json: { type: "boolean", default: false } },
      allowPositionals: true,
    });
    const store = await context.store();
    const json = values.json === true;
    switch (positionals[0]) {
      case "create": {
        const organizationId = requireOption(values, "org");
        const name = requireOption(values, "name");
        if (name.length > 100) throw new UsageError("--name must be at most 100 characters");
        if ((await store.getOrganization(organizationId)) === null) throw new UsageError(`organization ${organizationId} does not exist`);
        await store.ensureSystemUser(Date.now());
        const created = await createApiKey(store, { organizationId, name, createdBy: SYSTEM_USER_ID, keyPrefix: context.config.keyPrefix, now: Date.now() });
        output(context, json, { key: keyJSON(created.key), clearKey: created.clearKey }, `${created.key.id}\t${created.clearKey}\n(the secret is shown once)`);
        return;
      }
      case "list": {
        const organizationId = requireOption(values, "org");
        const keys = [];
        let after: string | undefined;
        do {
          const page = await store.listApiKeys(organizationId, { limit: 100, after });
          keys.push(...page.items.map(keyJSON));
          after = page.nextCursor ?? undefined;
        } while (after !== undefined);
        output(context, json, keys, keys.map((k) => `${k.id}\t${k.keyPrefix}…\t${k.status}\t${k.name}`).join("\n"));
        return;
      }
      case "revoke": {
        const id = positionals[1];
        if (id === undefined) throw new UsageError("keys revoke needs a KEY_ID");
        const key = await store.getApiKeyById(id);
        if (key === null) throw new UsageError(`key ${id} does not exist`);
        const revoked = await store.revokeApiKey(key.organizationId, id);
        if (revoked === null) throw new UsageError(`key ${id} is ${key.status}; only an ACTIVE key can be revoked`);
        output(context, json, keyJSON(revoked), `${revoked.id}\tREVOKED`);
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use create, list or revoke`);
    }
  },
};
