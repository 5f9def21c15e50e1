import { parseDuration } from "../../lib/duration";
import { normalizeGTIN } from "../../modules/products/gtin";
import { type Command, output, parseCommandArgs, requireOption, UsageError } from "../command";

export const historyCommand: Command = {
  name: "history",
  summary: "Show and prune the price history of offers",
  usage:
    "history show GTIN [--merchant MERCHANT_ID] [--json]\n  history prune --older-than DURATION [--json]   (e.g. 365d: deletes history observed before then)",
  details:
    "Every change of an offer's price, currency, shipping or availability is kept with its observedAt (an identical repeat is not);\nthe database writes it whichever command or instance writes the offer. Current offers are never touched by prune.",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "history", { merchant: { type: "string" }, "older-than": { type: "string" } });
    const json = values.json === true;
    switch (positionals[0]) {
      case "show": {
        const raw = positionals[1];
        const gtin = raw === undefined ? null : normalizeGTIN(raw);
        if (gtin === null) throw new UsageError("history show needs a valid GTIN");
        const entries = await (await context.store()).listPriceHistory(gtin, values.merchant);
        const items = entries.map((entry) => ({ ...entry, observedAt: new Date(entry.observedAt).toISOString() }));
        output(
          context,
          json,
          items,
          items.length === 0
            ? `no price history for ${gtin}`
            : items.map((e) => `${e.observedAt}\t${e.merchantId}\t${e.priceAmount} ${e.currency}\t${e.availability}`).join("\n"),
        );
        return;
      }
      case "prune": {
        const raw = requireOption(values, "older-than");
        const age = parseDuration(raw);
        if (age === null || age < 1000) throw new UsageError(`--older-than must be a duration such as 90d or 12h, got "${raw}"`);
        const before = Date.now() - age;
        const deleted = await (await context.store()).prunePriceHistory(before);
        output(
          context,
          json,
          { deleted, before: new Date(before).toISOString() },
          `deleted ${deleted} price history rows observed before ${new Date(before).toISOString()}`,
        );
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use show or prune`);
    }
  },
};
