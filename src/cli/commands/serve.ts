import { systemClock } from "../../lib/clock";
import { seedDemo } from "../../modules/ingest/demo-data";
import { startServer } from "../../server";
import { createServices } from "../../services";
import { createLogger, type Logger } from "../../lib/logger";
import { describeDatabase } from "../../config";
import { lockDatabaseForServing } from "../../db/sqlite-serve-lock";
import type { Command, CommandContext } from "../command";
import { parseCommandArgs, programName } from "../command";

const DEMO_EMAIL = "demo@example.com";

export const serveCommand: Command = {
  name: "serve",
  createsDatabase: true,
  summary: "Run the HTTP API (applies pending migrations first)",
  usage: "serve [--port N] [--dev]   (--dev: development mode, seeds demo data into an empty database)",
  details: "serve refuses to start when its port is in use or another serve holds its SQLite file (exit 1).",
  async run(context) {
    parseCommandArgs(context, "serve", { port: { type: "string" }, dev: { type: "boolean" } });
    const { config } = context;
    const logger = createLogger({ level: config.logLevel });
    // Before the store is opened: a refused second serve must not migrate or recover anything.
    await refuseOccupiedPort(config.port);
    const serveLock = lockDatabaseForServing(config.databaseUrl);
    try {
      await serveUntilSignalled(context, logger);
    } finally {
      serveLock?.release();
    }
    // The store is closed by server.stop(); tell the runner not to close it again.
    return 0;
  },
};

async function serveUntilSignalled(context: CommandContext, logger: Logger): Promise<void> {
  const { config } = context;
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
  context.out(
    `price-service listening on ${base} (${config.env}, ${store.dialect})\n  Database: ${describeDatabase(config.databaseUrl)}\n  API reference: ${base}/docs\n  Dashboard: ${base}/dashboard`,
  );
  if (config.env === "development" && services.oidc === null) {
    logger.warn("development sign-in is enabled: anyone can sign in with just an email (no OIDC_ISSUER)");
    context.out(
      `  DEVELOPMENT sign-in (no OIDC_ISSUER): curl -i -X POST -H 'content-type: application/json' -d '{"email":"you@example.com"}' ${base}/api/v1/auth/dev-login`,
    );
  }
  if (config.env === "production" && services.oidc === null) {
    logger.warn("sign-in is not configured: set OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET so customers can use the dashboard");
    console.error(
      "price-service: warning: sign-in is not configured (no OIDC_ISSUER); the dashboard cannot sign anyone in until OIDC_ISSUER, OIDC_CLIENT_ID and OIDC_CLIENT_SECRET are set",
    );
  }
  if (demo === null && config.env === "development") {
    context.out(`\nThe database already has data. Create a key with:\n  ${programName()} keys create --org <ORG_ID> --name dev   (orgs list shows the ids)\n`);
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
}

/** Fails with a one-line message when another process listens on `port` (0 picks a free port, nothing to check). */
async function refuseOccupiedPort(port: number): Promise<void> {
  if (port === 0) return;
  const { createServer } = await import("node:net");
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        error.code === "EADDRINUSE"
          ? new Error(`port ${port} is already in use (another serve or program listens on it); stop it or choose another port with --port N`)
          : error,
      ),
    );
    probe.listen({ port, host: "0.0.0.0", exclusive: true }, () => probe.close(() => resolve()));
  });
}
