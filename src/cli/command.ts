import type { Config } from "../config";
import type { Store } from "../db/store";

export class UsageError extends Error {}

export interface CommandContext {
  args: string[];
  config: Config;
  /** Opens the configured store (and migrates it) on first call; closed by the runner. */
  store(): Promise<Store>;
  out(text: string): void;
}

export interface Command {
  name: string;
  summary: string;
  usage: string;
  run(context: CommandContext): Promise<number | void>;
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
    throw new UsageError(`--${name} must be a whole number of at least ${min}, got "${raw}"`);
  }
  return Number(raw);
}
