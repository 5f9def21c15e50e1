// `npm test`: the whole suite on SQLite, then again on PostgreSQL when a server answers
// (TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test), then the combined totals as
// the last two lines in bun's own format (` N pass`, ` N fail`), which .ci/run reads.
// Arguments are passed to both `bun test` runs (e.g. `npm test -- test/products`).
// `--postgres-only` (`npm run test:pg`), or only *.postgres.test.ts files given, skips the SQLite
// run and fails when no PostgreSQL server answers.
import { existsSync, readdirSync } from "node:fs";
import { DEFAULT_POSTGRES_URL, whyNotAnswering } from "./postgres-reachable";

interface RunResult {
  pass: number;
  fail: number;
  ok: boolean;
}

const TEST_TIMEOUT_MS = 30_000;

/** Runs `bun test`, echoing its output as it comes, and reads its last pass and fail counts. */
async function runBunTest(label: string, args: string[], env: Record<string, string | undefined>): Promise<RunResult> {
  console.log(`\n== bun test on ${label}\n`);
  // Tests start real servers, processes and databases: give a loaded machine room. Bun reads no
  // timeout from bunfig.toml, and its 5 s default also bounds every beforeAll/afterEach hook.
  const child = Bun.spawn([process.execPath, "test", `--timeout=${TEST_TIMEOUT_MS}`, ...args], { env, stdout: "pipe", stderr: "pipe" });
  let output = "";
  const echo = async (stream: ReadableStream<Uint8Array>, sink: NodeJS.WriteStream) => {
    const decoder = new TextDecoder();
    const reader = stream.getReader();
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) {
      const text = decoder.decode(chunk.value, { stream: true });
      output += text;
      sink.write(text);
    }
  };
  await Promise.all([echo(child.stdout, process.stdout), echo(child.stderr, process.stderr)]);
  const code = await child.exited;
  const last = (pattern: RegExp) => Number([...output.matchAll(pattern)].pop()?.[1] ?? 0);
  const pass = last(/^ *(\d+) pass$/gm);
  let fail = last(/^ *(\d+) fail$/gm);
  // A run that died before its summary still counts as a failure in the totals.
  if (code !== 0 && fail === 0) fail = 1;
  return { pass, fail, ok: code === 0 };
}

/** Best effort: start the local cluster when PostgreSQL is installed but down (as on CI machines). */
async function startLocalPostgres(databaseUrl: string): Promise<boolean> {
  if (!["127.0.0.1", "localhost", "[::1]"].includes(new URL(databaseUrl).hostname) || !existsSync("/etc/postgresql")) return false;
  for (const version of readdirSync("/etc/postgresql")) {
    console.log(`PostgreSQL is not answering; starting cluster ${version}/main`);
    Bun.spawnSync(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"], { stdout: "inherit", stderr: "inherit" });
  }
  for (let attempt = 0; attempt < 20; attempt++) {
    if ((await whyNotAnswering(databaseUrl)) === null) return true;
    await Bun.sleep(500);
  }
  return false;
}

const POSTGRES_ONLY = "--postgres-only";
const args = process.argv.slice(2).filter((arg) => arg !== POSTGRES_ONLY);
// Files named *.postgres.test.ts run on PostgreSQL only: given nothing else, there is no SQLite run.
const paths = args.filter((arg) => !arg.startsWith("-"));
const postgresFilesOnly = paths.length > 0 && paths.every((path) => path.endsWith(".postgres.test.ts"));
const postgresOnly = process.argv.includes(POSTGRES_ONLY) || postgresFilesOnly;
const results: RunResult[] = [];
if (!postgresOnly) results.push(await runBunTest("SQLite", args, { ...process.env, TEST_DATABASE_URL: "" }));

const postgresUrl = process.env.TEST_DATABASE_URL?.trim() || DEFAULT_POSTGRES_URL;
const { hostname, port, pathname } = new URL(postgresUrl);
const where = `${hostname}:${port || 5432}${pathname}`;
const unreachable = await whyNotAnswering(postgresUrl);
if (unreachable === null || (await startLocalPostgres(postgresUrl))) {
  // An empty ignore list brings in the PostgreSQL-only files that bunfig.toml leaves out.
  results.push(await runBunTest(`PostgreSQL (${where})`, ["--path-ignore-patterns=", ...args], { ...process.env, TEST_DATABASE_URL: postgresUrl }));
} else if (postgresOnly) {
  console.log(`\n== PostgreSQL at ${where} does not answer (${unreachable}): nothing was tested`);
  process.exit(1);
} else {
  console.log(`\n== PostgreSQL at ${where} does not answer (${unreachable}): only the SQLite run counts`);
}

const pass = results.reduce((sum, result) => sum + result.pass, 0);
const fail = results.reduce((sum, result) => sum + result.fail, 0);
console.log(`\n== combined: ${results.length === 2 ? "SQLite + PostgreSQL" : postgresOnly ? "PostgreSQL only" : "SQLite only"}`);
console.log(` ${pass} pass`);
console.log(` ${fail} fail`);
process.exit(results.every((result) => result.ok) ? 0 : 1);
