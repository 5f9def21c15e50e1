import { seedDemo } from "../../modules/ingest/demo-data";
import { type Command, output, UsageError, wholeNumber, parseCommandArgs } from "../command";

export const seedCommand: Command = {
  name: "seed",
  createsDatabase: true,
  summary: "Load demo data: products, offers, an organization with credits and a key",
  usage: "seed --demo [--products N] [--credits N] [--json]",
  async run(context) {
    const { values } = parseCommandArgs(context, "seed", {
      demo: { type: "boolean", default: false },
      products: { type: "string", default: "300" },
      credits: { type: "string", default: "1000" },
    });
    if (values.demo !== true) throw new UsageError("seed needs --demo");
    const seed = await seedDemo(await context.store(), {
      products: wholeNumber(values.products!, "products"),
      credits: wholeNumber(values.credits!, "credits", 0),
      keyPrefix: context.config.keyPrefix,
      now: Date.now(),
      freshnessWindowMs: context.config.freshnessWindowMs,
    });
    output(context, values.json === true, seed, `organization ${seed.organizationId}, ${seed.products} products\nAPI key (shown once): ${seed.clearKey}`);
  },
};
