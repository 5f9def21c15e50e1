// The executable against the sources: both started side by side from empty directories, each with demo
// data, a session, an API key and feed tokens of its own, then sent the same requests generated from
// the served OpenAPI document (hostile-requests.ts). Each request must get the same status and the
// same problem type from both, and no 500 from either. The executable is PRICE_SERVICE_BIN when set,
// else one built here with package.json's own build script, so a build that changes what the
// framework does at run time fails this test. DIFF_SEED replays a run; DIFF_REQUESTS sizes it.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { freePort } from "../browser/harness";
import { removeAfterTheRun } from "../support/cleanup";
import { createTestDatabase, type TestDatabase } from "../support/context";
import { runCLIAsync, type ServeProcess, type ServiceTarget, spawnServe } from "../support/service-process";
import { type HostileRequest, hostileRequests } from "./hostile-requests";

const ROOT = join(import.meta.dir, "../..");
const SEED = Number(process.env.DIFF_SEED ?? Math.floor(Math.random() * 2 ** 31));
const REQUESTS = Number(process.env.DIFF_REQUESTS ?? 1600);

function emptyDirectory(): string {
  const directory = mkdtempSync(join(tmpdir(), "price-diff-"));
  removeAfterTheRun(directory);
  return directory;
}

/** The executable under test, alone in an empty directory: PRICE_SERVICE_BIN, or built with `npm run build`'s command. */
function executable(): ServiceTarget {
  const directory = emptyDirectory();
  const copy = join(directory, "price-service");
  const given = process.env.PRICE_SERVICE_BIN?.trim();
  if (given) {
    copyFileSync(resolve(given), copy);
    chmodSync(copy, 0o755);
    return { argv: [copy], cwd: directory };
  }
  const script: string = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).scripts.build;
  const words = script.split(/\s+/);
  if (words[0] !== "bun" || !words.includes("--outfile")) throw new Error(`the build script is not a bun build with --outfile: ${script}`);
  words[words.indexOf("--outfile") + 1] = copy;
  const built = Bun.spawnSync([process.execPath, ...words.slice(1)], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  if (built.exitCode !== 0) throw new Error(`build failed: ${built.stderr.toString()}`);
  return { argv: [copy], cwd: directory };
}

interface Side {
  name: string;
  serve: ServeProcess;
  database: TestDatabase;
  /** Credentials and own resources, by the placeholder or credential name requests use. */
  values: Record<string, string>;
}

async function cliJSON(target: ServiceTarget, env: Record<string, string>, args: string[]): Promise<any> {
  const result = await runCLIAsync([...args, "--json"], env, { target });
  if (result.code !== 0) throw new Error(`${args.join(" ")} failed: ${result.stderr}`);
  return JSON.parse(result.stdout);
}

async function startSide(name: string, target: ServiceTarget): Promise<Side> {
  const database = await createTestDatabase();
  const port = await freePort();
  const env = { PUBLIC_URL: `http://127.0.0.1:${port}`, PRICE_ENV: "development", RATE_LIMIT: "1000000/s" };
  const serve = await spawnServe({ databaseUrl: database.url, target, port, env, args: ["--dev"] });
  const apiKey = /Demo API key \(shown once\): (\S+)/.exec(serve.stdout())?.[1];
  if (apiKey === undefined) throw new Error(`${name}: no demo key in ${serve.stdout()}`);
  const call = (path: string, init: RequestInit = {}) => fetch(`${serve.url}${path}`, { redirect: "manual", ...init });
  const signIn = await call("/api/v1/auth/dev-login", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email: "demo@example.com" }),
  });
  const session = /session=([^;]+)/.exec(signIn.headers.get("set-cookie") ?? "")?.[1];
  if (session === undefined) throw new Error(`${name}: dev-login gave no session (${signIn.status})`);
  const cookie = `session=${session}`;
  const key = await (
    await call("/api/v1/customer/api-keys", {
      method: "POST",
      headers: { cookie, "content-type": "application/json" },
      body: JSON.stringify({ name: "differential" }),
    })
  ).json();
  const hook = await (
    await call("/api/v1/customer/webhooks", {
      method: "POST",
      headers: { cookie, "content-type": "application/json" },
      body: JSON.stringify({ url: "https://example.com/hook", eventTypes: ["credits.low"] }),
    })
  ).json();
  const cliEnv = { ...env, DATABASE_URL: database.url };
  await cliJSON(target, cliEnv, ["feeds", "add", "differential", "--push"]);
  const readToken = await cliJSON(target, cliEnv, ["feeds", "token", "create", "--read", "--name", "differential"]);
  return {
    name,
    serve,
    database,
    values: {
      apiKey,
      session: cookie,
      feedToken: readToken.clearToken,
      "{ownKey}": key.key.id,
      "{ownWebhook}": hook.endpoint.id,
      "{ownFeedSource}": "differential",
    },
  };
}

interface Answer {
  status: number;
  /** The problem's slug (its `type` without the server's base), or the media type of a success. */
  kind: string;
}

async function send(side: Side, request: HostileRequest): Promise<Answer> {
  const path = request.path.replace(/\{own\w+\}/g, (placeholder) => encodeURIComponent(side.values[placeholder] ?? placeholder));
  const headers: Record<string, string> = { ...request.headers };
  if (request.credential === "session") headers.cookie = side.values.session!;
  else if (request.credential !== "none") headers.authorization = `Bearer ${side.values[request.credential]}`;
  let response: Response;
  try {
    response = await fetch(`${side.serve.url}${path}${request.query === "" ? "" : `?${request.query}`}`, {
      method: request.method,
      headers,
      body: request.body,
      redirect: "manual",
    });
  } catch (error) {
    // The client refused to send it (a header value fetch does not allow): the same on both sides.
    return { status: -1, kind: String(error).slice(0, 80) };
  }
  const type = response.headers.get("content-type") ?? "";
  const text = await response.text();
  if (!type.startsWith("application/problem+json")) return { status: response.status, kind: type.split(";")[0]! };
  const problem = JSON.parse(text) as { type: string };
  return { status: response.status, kind: problem.type.slice(problem.type.lastIndexOf("/problems/") + "/problems/".length) };
}

describe("the executable answers every generated request as the sources do", () => {
  let sources: Side;
  let binary: Side;

  beforeAll(async () => {
    console.log(`differential seed ${SEED} (replay: DIFF_SEED=${SEED} bun test test/e2e/differential.test.ts)`);
    const target = executable();
    [sources, binary] = await Promise.all([
      startSide("sources", { argv: [process.execPath, join(ROOT, "src/main.ts")], cwd: emptyDirectory() }),
      startSide("executable", target),
    ]);
  }, 120_000);

  afterAll(async () => {
    for (const side of [sources, binary]) {
      if (side === undefined) continue;
      side.serve.child.kill("SIGTERM");
      await side.serve.child.exited;
      await side.database.drop();
    }
  });

  test(`${REQUESTS} requests from the OpenAPI document: same status and problem type, no 500`, async () => {
    const document = await (await fetch(`${sources.serve.url}/openapi.json`)).json();
    const requests = hostileRequests(document, SEED, REQUESTS);
    expect(requests.length).toBeGreaterThanOrEqual(REQUESTS);
    const differences: string[] = [];
    const serverErrors: string[] = [];
    const authenticationAfterValidation: string[] = [];
    for (const request of requests) {
      const [fromSources, fromBinary] = [await send(sources, request), await send(binary, request)];
      const line = `${request.method} ${request.path}?${request.query.slice(0, 80)} (${request.operationId}: ${request.variant})`;
      if (fromSources.status !== fromBinary.status || fromSources.kind !== fromBinary.kind)
        differences.push(`${line}: sources ${fromSources.status} ${fromSources.kind}, executable ${fromBinary.status} ${fromBinary.kind}`);
      if (fromSources.status === 500 || fromBinary.status === 500) serverErrors.push(`${line}: sources ${fromSources.status}, executable ${fromBinary.status}`);
      if (request.secured && request.credential === "none" && fromSources.status !== 401 && fromSources.status !== -1)
        authenticationAfterValidation.push(`${line}: ${fromSources.status} ${fromSources.kind}`);
    }
    const report = (title: string, lines: string[]) =>
      lines.length === 0 ? "" : `${title} (${lines.length}, seed ${SEED}):\n${lines.slice(0, 30).join("\n")}\n`;
    expect(report("differences", differences) + report("500 answers", serverErrors) + report("no credential but not 401", authenticationAfterValidation)).toBe(
      "",
    );
  }, 300_000);
});
