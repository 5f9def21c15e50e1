// Helpers for tests that run the service as its own process, as operators do: `bun src/main.ts …`,
// or a built executable (test/e2e).
import type { Subprocess } from "bun";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";

const ROOT = new URL("../..", import.meta.url).pathname;

/** What runs the service in a child process: the command line before the command's own arguments, and where it runs. */
export interface ServiceTarget {
  argv: string[];
  cwd: string;
}

/** The sources, from the project's directory. */
export const SOURCES: ServiceTarget = { argv: [process.execPath, "src/main.ts"], cwd: ROOT };

/** The sources with FILE (relative to the project) loaded first, to slow or break something inside the server. */
export function sourcesWithPreload(file: string): ServiceTarget {
  return { argv: [process.execPath, "--preload", file, "src/main.ts"], cwd: ROOT };
}

export interface SeededDatabase {
  organizationId: string;
  keyId: string;
  clearKey: string;
  /** GTIN-13 of a product with one fresh offer. */
  gtin: string;
}

/** A database file with one organization, `credits` credits, one key and one product with a fresh offer. */
export async function seedDatabase(databaseUrl: string, credits: number): Promise<SeededDatabase> {
  const store = SQLiteStore.open(databaseUrl);
  const now = Date.now();
  const organization = await store.createOrganization({ name: "Process Org", now });
  await store.grantCredits({
    organizationId: organization.id,
    source: "grant",
    type: "grant",
    amount: credits,
    expiresAt: null,
    description: "test grant",
    now,
  });
  await store.ensureSystemUser(now);
  const created = await createApiKey(store, { organizationId: organization.id, name: "process key", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });
  const product = { gtin: "04006381333931", title: "Pencil", brand: "Acme" };
  const offer = {
    merchantId: "m-1",
    merchantName: "Shop",
    priceAmount: 199,
    currency: "EUR",
    shippingAmount: null,
    availability: "in_stock" as const,
    condition: "new" as const,
    url: null,
    observedAt: now,
  };
  await store.applyFeedRecords([{ product, offer }], now);
  await store.close();
  return { organizationId: organization.id, keyId: created.key.id, clearKey: created.clearKey, gtin: "4006381333931" };
}

export interface CLIResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI as a child process to completion. */
export function runCLI(args: string[], env: Record<string, string>): CLIResult {
  const result = Bun.spawnSync([...SOURCES.argv, ...args], { cwd: SOURCES.cwd, env: { ...process.env, ...env } });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

/** Runs the CLI as a child process without blocking this one (requests from this process go on meanwhile). */
export async function runCLIAsync(args: string[], env: Record<string, string>, options: { target?: ServiceTarget; stdin?: string } = {}): Promise<CLIResult> {
  const { target = SOURCES, stdin } = options;
  const child = Bun.spawn([...target.argv, ...args], {
    cwd: target.cwd,
    env: { ...process.env, ...env },
    stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

export interface ServeProcess {
  url: string;
  child: Subprocess<"ignore", "pipe", "pipe">;
  stdout(): string;
  stderr(): string;
  /** Resolves when standard error contains `text`. */
  waitForStderr(text: string, timeoutMs?: number): Promise<void>;
}

async function collect(stream: ReadableStream<Uint8Array>, sink: { text: string }): Promise<void> {
  const decoder = new TextDecoder();
  const reader = stream.getReader();
  for (let read = await reader.read(); !read.done; read = await reader.read()) sink.text += decoder.decode(read.value, { stream: true });
}

async function waitUntil(condition: () => boolean, timeoutMs: number, what: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what()}`);
    await Bun.sleep(20);
  }
}

/** Starts `serve` of `target` (default: the sources) on `port` (default: one the system picks) and waits until it logs that it listens. */
export async function spawnServe(options: {
  databaseUrl: string;
  target?: ServiceTarget;
  port?: number;
  env?: Record<string, string>;
  args?: string[];
}): Promise<ServeProcess> {
  const { target = SOURCES } = options;
  const child = Bun.spawn([...target.argv, "serve", "--port", String(options.port ?? 0), ...(options.args ?? [])], {
    cwd: target.cwd,
    // LOG_LEVEL info: the "listening" line carries the port the server was given.
    env: { ...process.env, PRICE_ENV: "production", RATE_LIMIT: "1000000/s", ...options.env, DATABASE_URL: options.databaseUrl, LOG_LEVEL: "info" },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const out = { text: "" };
  const err = { text: "" };
  void collect(child.stdout, out);
  void collect(child.stderr, err);
  await waitUntil(
    () => /"message":"listening"/.test(out.text) || child.exitCode !== null,
    15_000,
    () => `serve to listen; stdout: ${out.text} stderr: ${err.text}`,
  );
  const url = /"message":"listening"[^\n]*"url":"([^"]+)"/.exec(out.text)?.[1];
  if (url === undefined) throw new Error(`serve did not start (exit ${child.exitCode}): ${err.text}`);
  return {
    url,
    child,
    stdout: () => out.text,
    stderr: () => err.text,
    waitForStderr: (text, timeoutMs = 10_000) =>
      waitUntil(
        () => err.text.includes(text),
        timeoutMs,
        () => `"${text}" on standard error; got: ${err.text}`,
      ),
  };
}
