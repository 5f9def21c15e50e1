// The CLI: global options, the commands, exit codes. src/main.ts runs it.
import { VERSION } from "../app";
import { type Command, type CommandContext, programName, type TerminalOutput, UsageError } from "./command";
import { backupCommand } from "./commands/backup";
import { creditsCommand } from "./commands/credits";
import { feedsCommand } from "./commands/feeds";
import { healthcheckCommand } from "./commands/healthcheck";
import { historyCommand } from "./commands/history";
import { importCommand } from "./commands/import";
import { keysCommand } from "./commands/keys";
import { migrateCommand } from "./commands/migrate";
import { ordersCommand } from "./commands/orders";
import { orgsCommand } from "./commands/orgs";
import { seedCommand } from "./commands/seed";
import { serveCommand } from "./commands/serve";
import { ConfigError, DEFAULT_DATABASE_URL, describeDatabase, EnvironmentSchema, loadConfig } from "../config";
import type { Store } from "../db/store";
import { openStore } from "../services";

const COMMANDS: Command[] = [
  serveCommand,
  migrateCommand,
  seedCommand,
  importCommand,
  feedsCommand,
  historyCommand,
  orgsCommand,
  keysCommand,
  creditsCommand,
  ordersCommand,
  backupCommand,
  healthcheckCommand,
];

/** Flags that override an environment variable, for every command, before or after the command's name. */
const GLOBAL_FLAGS: Record<string, string> = { "--port": "PORT", "--database-url": "DATABASE_URL", "--public-url": "PUBLIC_URL" };

const ENVIRONMENT_HELP = Object.entries(EnvironmentSchema.properties)
  .map(([name, schema]) => `  ${name.padEnd(22)} ${(schema as { description?: string }).description ?? ""}`.trimEnd())
  .join("\n");

const GLOBAL_HELP = `Global options (before or after the command):
  --database-url URL     database (sets DATABASE_URL); default ${DEFAULT_DATABASE_URL}, resolved against the working directory
  --port N               HTTP port (sets PORT)
  --public-url URL       public base URL (sets PUBLIC_URL)
  --dev                  development mode (sets PRICE_ENV=development)
  --json                 print the result as JSON
  --verbose              print the database in use on standard error
  --help, -h             this help; COMMAND --help for a command's options
  --version              print the version`;

const EXIT_CODES = `Exit codes: 0 success, 1 failure (a refused or failed operation), 2 usage error (unknown command or option, invalid value or configuration).`;

function help(): string {
  const name = programName();
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(11)} ${c.summary}`);
  return `price-service ${VERSION}: product price data API\n\nUsage: ${name} <command> [options]\n\nCommands:\n${lines.join("\n")}\n\n${GLOBAL_HELP}\n\nEnvironment variables:\n${ENVIRONMENT_HELP}\n\n${EXIT_CODES}`;
}

function commandHelp(command: Command): string {
  const name = programName();
  const usage = command.usage
    .split("\n")
    .map((line) => `  ${name} ${line.trim()}`)
    .join("\n");
  return `${command.summary}\n\nUsage:\n${usage}${command.details ? `\n\n${command.details}` : ""}\n\n${GLOBAL_HELP}\n\n${EXIT_CODES}`;
}

interface Globals {
  env: Record<string, string>;
  verbose: boolean;
  help: boolean;
  version: boolean;
  rest: string[];
}

/** Splits global flags (environment overrides, --help, --verbose), wherever they are, from the command and its own arguments. */
function extractGlobals(args: string[]): Globals {
  const globals: Globals = { env: {}, verbose: false, help: false, version: false, rest: [] };
  for (let index = 0; index < args.length; index++) {
    const arg = args[index]!;
    const [flag, inline] = arg.split(/=(.*)/s, 2) as [string, string | undefined];
    if (arg === "--") {
      globals.rest.push(...args.slice(index));
      break;
    }
    if (flag === "--dev") globals.env.PRICE_ENV = "development";
    else if (arg === "--verbose") globals.verbose = true;
    else if (arg === "--help" || arg === "-h") globals.help = true;
    else if (arg === "--version") globals.version = true;
    else if (Object.hasOwn(GLOBAL_FLAGS, flag)) {
      const value = inline ?? args[++index];
      if (value === undefined) throw new UsageError(`${flag} needs a value`);
      globals.env[GLOBAL_FLAGS[flag]!] = value;
    } else globals.rest.push(arg);
  }
  return globals;
}

export async function main(
  argv: string[],
  out: (text: string) => void = (text) => console.log(text),
  err: (text: string) => void = (text) => console.error(text),
  terminal: TerminalOutput = process.stderr,
): Promise<number> {
  const globals = extractGlobals(argv);
  // The command is the first word; a command's own flags (--json) may come before it too.
  const at = globals.rest.findIndex((arg) => !arg.startsWith("-"));
  const name = at === -1 ? undefined : globals.rest[at];
  const args = globals.rest.filter((_, index) => index !== at);
  if (globals.version) {
    out(VERSION);
    return 0;
  }
  if (name === undefined && args.length > 0) throw new UsageError(`no command given; see ${programName()} --help`);
  if (name === undefined || name === "help") {
    out(help());
    return name === undefined && !globals.help ? 2 : 0;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) throw new UsageError(`unknown command "${name}"; see ${programName()} --help`);
  if (globals.help) {
    out(commandHelp(command));
    return 0;
  }
  const config = loadConfig({ ...process.env, ...globals.env });
  if (globals.verbose) err(`price-service: database ${describeDatabase(config.databaseUrl)}`);
  let store: Store | null = null;
  const context: CommandContext = {
    args,
    config,
    out,
    terminal,
    store: async () => (store ??= await openStore(config.databaseUrl, { create: command.createsDatabase === true })),
  };
  try {
    return (await command.run(context)) ?? 0;
  } finally {
    await (store as Store | null)?.close();
  }
}

/** The exit code for an error: 2 for a mistake in the command line or configuration, 1 for everything else. */
export function exitCodeFor(error: unknown): number {
  return error instanceof UsageError || error instanceof ConfigError ? 2 : 1;
}

/** Runs the command line this process was started with, and exits with its code. */
export function runCommandLine(): void {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (error: unknown) => {
      const message = error instanceof ConfigError ? `invalid configuration: ${error.message}` : error instanceof Error ? error.message : String(error);
      console.error(`price-service: ${message.split("\n")[0]}`);
      process.exit(exitCodeFor(error));
    },
  );
}
