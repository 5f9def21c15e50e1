import { SYSTEM_USER_ID } from "../../db/store";
import { createApiKey, keysJSON, oneKeyJSON } from "../../modules/keys/service";
import { type Command, output, requireOption, UsageError, parseCommandArgs, programName } from "../command";

export const keysCommand: Command = {
  name: "keys",
  summary: "Create, list and revoke API keys",
  usage: "keys create --org ORG_ID --name NAME [--json]\n  keys list --org ORG_ID [--json]\n  keys revoke KEY_ID [--json]",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "keys", { org: { type: "string" }, name: { type: "string" } });
    const store = await context.store();
    const json = values.json === true;
    switch (positionals[0]) {
      case "create": {
        const organizationId = requireOption(values, "org");
        const name = requireOption(values, "name");
        if (name.length > 100) throw new UsageError("--name must be at most 100 characters");
        if ((await store.getOrganization(organizationId)) === null)
          throw new UsageError(`organization ${organizationId} does not exist; orgs list shows the ids`);
        await store.ensureSystemUser(Date.now());
        const created = await createApiKey(store, { organizationId, name, createdBy: SYSTEM_USER_ID, keyPrefix: context.config.keyPrefix, now: Date.now() });
        output(
          context,
          json,
          { key: await oneKeyJSON(store, created.key, Date.now()), clearKey: created.clearKey },
          `${created.key.id}\t${created.clearKey}\n(the secret is shown once)`,
        );
        return;
      }
      case "list": {
        const organizationId = requireOption(values, "org");
        if ((await store.getOrganization(organizationId)) === null)
          throw new UsageError(`organization ${organizationId} does not exist; orgs list shows the ids`);
        const keys = [];
        let after: string | undefined;
        do {
          const page = await store.listApiKeys(organizationId, { limit: 100, after });
          keys.push(...(await keysJSON(store, page.items, Date.now())));
          after = page.nextCursor ?? undefined;
        } while (after !== undefined);
        output(
          context,
          json,
          keys,
          keys.length === 0
            ? `no API keys in ${organizationId}; create one with ${programName()} keys create --org ${organizationId} --name NAME`
            : keys.map((k) => `${k.id}\t${k.keyPrefix}…\t${k.status}\t${k.name}`).join("\n"),
        );
        return;
      }
      case "revoke": {
        const id = positionals[1];
        if (id === undefined) throw new UsageError("keys revoke needs a KEY_ID");
        const key = await store.getApiKeyById(id);
        if (key === null) throw new UsageError(`key ${id} does not exist; keys list --org ORG_ID shows the ids`);
        const revoked = await store.revokeApiKey(key.organizationId, id, Date.now());
        if (revoked === null) throw new UsageError(`key ${id} is ${key.status}; only an ACTIVE key can be revoked`);
        output(context, json, await oneKeyJSON(store, revoked, Date.now()), `${revoked.id}\tREVOKED`);
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use create, list or revoke`);
    }
  },
};
