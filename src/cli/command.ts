import { basename } from "node:path";
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { Config } from "../config";
import type { Store } from "../db/store";

/** A mistake in the command line: exit code 2. */
export class UsageError extends Error {}

export interface CommandContext {
  args: string[];
  config: Config;
  /** Opens the configured store (and migrates it) on first call; closed by the runner. */
  store(): Promise<Store>;
  out(text: string): void;
  /** Where progress lines go: standard error unless a test stands in for a terminal. */
  terminal?: TerminalOutput;
}

export interface TerminalOutput {
  isTTY?: boolean;
  write(text: string): unknown;
}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  /** serve, migrate and seed may create the database; every other command refuses a missing one. */
  createsDatabase?: boolean;
  /** Extra help text (fields, examples), printed by `COMMAND --help`. */
  details?: string;
  run(context: CommandContext): Promise<number | void>;
}

/** How the operator invoked this program, for printed hints: the executable's name, or `bun src/main.ts` from the sources. */
export function programName(): string {
  const executable = basename(process.execPath);
  return executable === "bun" || executable === "bun.exe" ? "bun src/main.ts" : executable;
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/**
 * node:util parseArgs with the conventions of this CLI: `--json` on every command, a string option
 * takes a value that starts with "-" (`--amount -5` is checked by the command, not "ambiguous"), and
 * every parse error is a usage error (exit 2) that points to the command's help.
 */
export function parseCommandArgs<O extends Options>(context: CommandContext, command: string, options: O) {
  const all = { ...options, json: { type: "boolean", default: false } } as O & { json: { type: "boolean"; default: false } };
  const args: string[] = [];
  for (let index = 0; index < context.args.length; index++) {
    const arg = context.args[index]!;
    const name = arg.startsWith("--") ? arg.slice(2) : null;
    const next = context.args[index + 1];
    if (name !== null && all[name]?.type === "string" && next?.startsWith("-") && next !== "-") {
      args.push(`${arg}=${next}`);
      index++;
    } else args.push(arg);
  }
  try {
    return parseArgs({ args, options: all, allowPositionals: true, strict: true });
  } catch (error) {
    const message = error instanceof Error ? error.message.split("\n")[0]!.replace(/\. To specify.*$/, "") : String(error);
    throw new UsageError(`${message}; see ${programName()} ${command} --help`);
  }
}

/** Prints `value` as JSON with --json, else the human text. */
export function output(context: CommandContext, json: boolean, value: unknown, human: string): void {
  context.out(json ? JSON.stringify(value, null, 2) : human);
}

export function requireOption(values: Record<string, unknown>, name: string): string {
  const value = values[name];
  if (typeof value !== "string" || value.trim() === "") throw new UsageError(`--${name} is required`);
  return value.trim();
}

export function wholeNumber(raw: string, name: string, min = 1): number {
  if (!/^\d+$/.test(raw) || Number(raw) < min || !Number.isSafeInteger(Number(raw))) {
    const rule = min === 1 ? "a positive whole number" : `a whole number of at least ${min}`;
    throw new UsageError(`--${name} must be ${rule}, got "${raw}"`);
  }
  return Number(raw);
}

/**
 * A progress line on standard error, rewritten in place; only on a terminal and without --json, so
 * pipes, logs and scripts never see it. `done` clears it before the result is printed.
 */
export function progressLine(context: CommandContext, json: boolean): { update(text: string): void; done(): void } {
  const terminal = context.terminal ?? process.stderr;
  if (json || terminal.isTTY !== true) return { update() {}, done() {} };
  let isShown = false;
  return {
    update: (text) => {
      isShown = true;
      terminal.write(`\r\x1b[K${text}`);
    },
    done: () => {
      if (isShown) terminal.write("\r\x1b[K");
    },
  };
}
