// A serving process runs with its allocator keeping the pages it frees (src/cli/server-allocator.ts):
// the product (the executable or the sources) replaces itself at start, keeping its pid, its
// arguments and every other variable, unless the operator set the allocator's variable.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PURGE_DELAY_VARIABLE, SERVER_PURGE_DELAY } from "../../src/cli/server-allocator";
import { type ServeProcess, spawnServe } from "../support/service-process";
import { TARGET } from "./harness";

let directory: string;
const started: ServeProcess[] = [];

beforeAll(() => {
  directory = mkdtempSync(join(tmpdir(), "price-allocator-"));
});
afterAll(async () => {
  for (const serve of started) serve.child.kill("SIGKILL");
  await Promise.all(started.map((serve) => serve.child.exited));
  rmSync(directory, { recursive: true, force: true });
});

/** The environment of a running process, as the kernel holds it. */
function environmentOf(pid: number): Map<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").filter(Boolean);
  return new Map(entries.map((entry) => [entry.slice(0, entry.indexOf("=")), entry.slice(entry.indexOf("=") + 1)]));
}

/** Serves from a directory of its own (`files` written there first), with TARGET's command line. */
async function serve(name: string, env: Record<string, string> = {}, files: Record<string, string> = {}): Promise<ServeProcess> {
  const cwd = join(directory, name);
  mkdirSync(cwd);
  for (const [file, text] of Object.entries(files)) writeFileSync(join(cwd, file), text);
  const target = { argv: TARGET.argv, cwd };
  const process = await spawnServe({ databaseUrl: `sqlite:${join(cwd, "service.db")}`, target, env: { ...env, ALLOCATOR_TEST: name } });
  started.push(process);
  return process;
}

test("serve runs in the process it was started as, with the allocator keeping freed pages and every other variable as given", async () => {
  const server = await serve("default");
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  const environment = environmentOf(server.child.pid);
  expect(environment.get(PURGE_DELAY_VARIABLE)).toBe(SERVER_PURGE_DELAY);
  expect(environment.get("ALLOCATOR_TEST")).toBe("default");
  expect(readFileSync(`/proc/${server.child.pid}/cmdline`, "utf8").split("\0")).toContain("serve");
});

test("a value the operator set is kept", async () => {
  const server = await serve("operator", { [PURGE_DELAY_VARIABLE]: "250" });
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  expect(environmentOf(server.child.pid).get(PURGE_DELAY_VARIABLE)).toBe("250");
});

test("a value from a .env file reaches the allocator through the restart", async () => {
  const server = await serve("dotenv", {}, { ".env": `${PURGE_DELAY_VARIABLE}=500\n` });
  expect((await fetch(`${server.url}/healthz`)).status).toBe(200);
  expect(environmentOf(server.child.pid).get(PURGE_DELAY_VARIABLE)).toBe("500");
});
