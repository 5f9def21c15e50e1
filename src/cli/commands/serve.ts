import { parseArgs } from "node:util";
import { systemClock } from "../../lib/clock";
import { seedDemo } from "../../modules/ingest/demo-data";
import { startServer } from "../../server";
import { createServices } from "../../services";
import { createLogger } from "../../lib/logger";
import type { Command } from "../command";

const DEMO_EMAIL = "demo@example.com";

export const serveCommand: Command = {
  name: "serve",
  summary: "Run the HTTP API (applies pending migrations first)",
  usage: "serve [--port N] [--dev]   (--dev: development mode, seeds demo data into an empty database)",
  async run(context) {
    parseArgs({ args: context.args, options: { port: { type: "string" }, dev: { type: "boolean" } } });
    const { config } = context;
    const logger = createLogger({ level: config.logLevel });
    const store = await context.store();
    const services = createServices({ config, store, clock: systemClock, logger });

    let demo: Awaited<ReturnType<typeof seedDemo>> | null = null;
    if (config.env === "development" && (await store.countProducts()) === 0) {
      demo = await seedDemo(store, { products: 300, credits: 1000, keyPrefix: config.keyPrefix, now: Date.now(), freshnessWindowMs: config.freshnessWindowMs });
      // Whoever signs in as the demo email joins the demo organization and sees its credits and key.
      await store.upsertInvitation({ email: DEMO_EMAIL, organizationId: demo.organizationId, role: "owner", createdAt: Date.now() });
    }
    const server = await startServer(services, { port: config.port });
    logger.info("listening", { url: server.url, env: config.env, database: store.dialect });
    const base = config.publicUrl;
    context.out(`price-service listening on ${base} (${config.env}, ${store.dialect})\n  API reference: ${base}/docs\n  Dashboard: ${base}/dashboard`);
    if (config.env === "development" && services.oidc === null) {
      logger.warn("development sign-in is enabled: anyone can sign in with just an email (no OIDC_ISSUER)");
      context.out(`  DEVELOPMENT sign-in (no OIDC_ISSUER): curl -i -X POST -H 'content-type: application/json' -d '{"email":"you@example.com"}' ${base}/api/v1/auth/dev-login`);
    }
    if (demo === null && config.env === "development") {
      context.out(`\nThe database already has data. Create a key with:\n  bun src/main.ts keys create --org <ORG_ID> --name dev   (orgs list shows the ids)\n`);
    }
    if (demo !== null) {
      context.out(
        `\nDemo data loaded: ${demo.products} products, organization ${demo.organizationId} with 1000 credits.\n` +
          `Demo API key (shown once): ${demo.clearKey}\n` +
          `Dashboard of the demo organization: sign in at ${base}/dashboard as ${DEMO_EMAIL}\n\n` +
          `  curl -H "Authorization: Bearer ${demo.clearKey}" ${base}/api/v1/products/${demo.freshGTIN}/price\n`,
      );
    }

    await new Promise<void>((resolve) => {
      const shutdown = (signal: string) => {
        logger.info("shutting down", { signal });
        server.stop().then(resolve, (error: unknown) => {
          logger.error("shutdown failed", { error: String(error) });
          resolve();
        });
      };
      process.once("SIGTERM", () => shutdown("SIGTERM"));
      process.once("SIGINT", () => shutdown("SIGINT"));
    });
    // The store is closed by server.stop(); tell the runner not to close it again.
    return 0;
  },
};
