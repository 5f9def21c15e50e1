#!/usr/bin/env bun
import { VERSION } from "./app";
import { type Command, type CommandContext, UsageError } from "./cli/command";
import { backupCommand } from "./cli/commands/backup";
import { creditsCommand } from "./cli/commands/credits";
import { healthcheckCommand } from "./cli/commands/healthcheck";
import { importCommand } from "./cli/commands/import";
import { keysCommand } from "./cli/commands/keys";
import { migrateCommand } from "./cli/commands/migrate";
import { ordersCommand } from "./cli/commands/orders";
import { orgsCommand } from "./cli/commands/orgs";
import { seedCommand } from "./cli/commands/seed";
import { serveCommand } from "./cli/commands/serve";
import { ConfigError, loadConfig } from "./config";
import type { Store } from "./db/store";
import { openStore } from "./services";

const COMMANDS: Command[] = [serveCommand, migrateCommand, seedCommand, importCommand, orgsCommand, keysCommand, creditsCommand, ordersCommand, backupCommand, healthcheckCommand];

/** Flags that override an environment variable, for every command. */
const GLOBAL_FLAGS: Record<string, string> = { "--port": "PORT", "--database-url": "DATABASE_URL", "--public-url": "PUBLIC_URL" };

function help(): string {
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(11)} ${c.summary}`);
  return `price-service ${VERSION}: product price data API\n\nUsage: price-service <command> [options]\n\nCommands:\n${lines.join("\n")}\n\nGlobal options: --database-url URL, --port N, --public-url URL, --dev, --version, --help\nEvery command takes --help; most take --json. Configuration comes from the environment (see README).`;
}

/** Splits global flags (which become environment overrides) from the command's own arguments. */
function extractGlobals(args: string[]): { env: Record<string, string>; rest: string[] } {
  const env: Record<string, string> = {};
  const rest: string[] = [];
  for (let index = 0; index < args.length; index++) {
    const arg = args[index]!;
    const [flag, inline] = arg.split(/=(.*)/s, 2) as [string, string | undefined];
    if (flag === "--dev") env.PRICE_ENV = "development";
    else if (flag in GLOBAL_FLAGS) {
      const value = inline ?? args[++index];
      if (value === undefined) throw new UsageError(`${flag} needs a value`);
      env[GLOBAL_FLAGS[flag]!] = value;
    } else rest.push(arg);
  }
  return { env, rest };
}

export async function main(argv: string[], out: (text: string) => void = (text) => console.log(text)): Promise<number> {
  const [name, ...args] = argv;
  if (name === undefined || name === "--help" || name === "-h" || name === "help") {
    out(help());
    return name === undefined ? 1 : 0;
  }
  if (name === "--version" || name === "-v") {
    out(VERSION);
    return 0;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) throw new UsageError(`unknown command "${name}"; see price-service --help`);
  if (args.includes("--help") || args.includes("-h")) {
    out(`${command.summary}\n\nUsage:\n  ${command.usage}`);
    return 0;
  }
  const { env, rest } = extractGlobals(args);
  const config = loadConfig({ ...process.env, ...env });
  let store: Store | null = null;
  const context: CommandContext = {
    args: rest,
    config,
    out,
    store: async () => (store ??= await openStore(config.databaseUrl)),
  };
  try {
    return (await command.run(context)) ?? 0;
  } finally {
    await (store as Store | null)?.close();
  }
}

if (import.meta.main) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      const message =
        error instanceof ConfigError
          ? `invalid configuration: ${error.message}`
          : error instanceof UsageError || (error instanceof Error && error.name === "TypeError" && "code" in error)
            ? error.message
            : error instanceof Error
              ? error.message
              : String(error);
      console.error(`price-service: ${message.split("\n")[0]}`);
      process.exit(error instanceof UsageError || error instanceof ConfigError ? 2 : 1);
    },
  );
}
