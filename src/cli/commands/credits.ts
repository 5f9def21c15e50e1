import type { BucketSource } from "../../db/store";
import { balanceJSON, bucketJSON } from "../../modules/billing/serialize";
import { type Command, output, requireOption, UsageError, wholeNumber, parseCommandArgs } from "../command";

const SOURCES: BucketSource[] = ["grant", "trial", "pack", "subscription"];

export const creditsCommand: Command = {
  name: "credits",
  summary: "Grant credits and show balances",
  usage: "credits grant --org ORG_ID --amount N [--expires-at ISO] [--source grant|trial|pack|subscription] [--json]\n  credits balance --org ORG_ID [--json]",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "credits", {
      org: { type: "string" },
      amount: { type: "string" },
      "expires-at": { type: "string" },
      source: { type: "string", default: "grant" },
    });
    const json = values.json === true;
    const organizationId = requireOption(values, "org");
    // A bad amount is a usage error whatever the organization: checked before the database is read.
    const amount = positionals[0] === "grant" ? wholeNumber(requireOption(values, "amount"), "amount") : 0;
    const store = await context.store();
    if ((await store.getOrganization(organizationId)) === null) throw new UsageError(`organization ${organizationId} does not exist; orgs list shows the ids`);
    switch (positionals[0]) {
      case "grant": {
        const source = values.source as BucketSource;
        if (!SOURCES.includes(source)) throw new UsageError(`--source must be one of ${SOURCES.join(", ")}`);
        let expiresAt: number | null = null;
        if (values["expires-at"] !== undefined) {
          expiresAt = Date.parse(values["expires-at"]);
          if (Number.isNaN(expiresAt) || !/T.*(Z|[+-]\d\d:?\d\d)$/.test(values["expires-at"]))
            throw new UsageError(`--expires-at must be an ISO 8601 timestamp with a timezone`);
          if (expiresAt <= Date.now()) throw new UsageError("--expires-at must be in the future");
        }
        const bucket = await store.grantCredits({
          organizationId,
          source,
          type: source === "pack" ? "purchase" : source,
          amount,
          expiresAt,
          description: "Granted by an operator",
          now: Date.now(),
        });
        output(context, json, bucketJSON(bucket), `${bucket.id}\t+${amount}`);
        return;
      }
      case "balance": {
        const balance = balanceJSON(await store.getBalance(organizationId, Date.now()));
        output(context, json, balance, `available ${balance.available}, reserved ${balance.reserved}, ${balance.buckets.length} bucket(s)`);
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use grant or balance`);
    }
  },
};
