// The published contract as the tools read it: the /openapi.json the app serves (with PUBLIC_URL
// set as in production), and Spectral (`spectral:oas`, .spectral.yaml) and Redocly (`recommended`,
// redocly.yaml) run on a file of it. scripts/check-contract.ts is the command; test/http/contract.test.ts
// runs the same linters.
import { join } from "node:path";
import { createApp } from "../src/app";
import { loadConfig } from "../src/config";
import { SQLiteStore } from "../src/db/sqlite-store";
import { systemClock } from "../src/lib/clock";
import { createLogger } from "../src/lib/logger";
import { createServices } from "../src/services";

const REPO = new URL("..", import.meta.url).pathname;
const BIN = join(REPO, "node_modules/.bin");
// A reserved name (RFC 6761), so a linter that checks the server sees a real-looking deployment.
export const CONTRACT_PUBLIC_URL = "https://price-service.test";

/** The document the service serves for PUBLIC_URL. */
export async function servedDocument(publicUrl = CONTRACT_PUBLIC_URL): Promise<Record<string, any>> {
  const config = loadConfig({ PRICE_ENV: "development", RATE_LIMIT: "100000/s", PUBLIC_URL: publicUrl });
  const store = await SQLiteStore.open("sqlite::memory:");
  try {
    const app = createApp(createServices({ config, store, clock: systemClock, logger: createLogger({ level: "silent" }) }));
    return await (await app.handle(new Request(`${publicUrl}/openapi.json`))).json();
  } finally {
    await store.close();
  }
}

export interface LintRun {
  tool: string;
  ok: boolean;
  output: string;
}

async function run(tool: string, command: string[]): Promise<LintRun> {
  const child = Bun.spawn(command, {
    cwd: REPO,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, NO_COLOR: "1", REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { tool, ok: code === 0, output: `${stdout}${stderr}`.trim() };
}

/** Spectral and Redocly on a document file; each fails only on errors. */
export async function lintContract(documentPath: string): Promise<LintRun[]> {
  return Promise.all([
    run("spectral", [join(BIN, "spectral"), "lint", "--ruleset", join(REPO, ".spectral.yaml"), documentPath]),
    run("redocly", [join(BIN, "redocly"), "lint", "--config", join(REPO, "redocly.yaml"), "--format", "summary", documentPath]),
  ]);
}
