// The end-to-end suite's one way to run the product: the sources (`bun src/main.ts`) by default, or
// the executable named by PRICE_SERVICE_BIN, copied alone into an empty directory, as an operator
// installs it. Either runs from a directory that is not the project's, on a real port, over a SQLite
// file or (TEST_DATABASE_URL) a fresh PostgreSQL schema. On PostgreSQL the service is two instances
// behind a round-robin balancer, as a scaled-out deployment runs it: every test of the suite then
// holds across instances.
import { expect } from "bun:test";
import { appendFileSync, chmodSync, copyFileSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { freePort } from "../browser/harness";
import { removeAfterTheRun } from "../support/cleanup";
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/context";
import { roundRobin } from "../support/round-robin";
import { type CLIResult, runCLIAsync, type ServeProcess, type ServiceTarget, spawnServe } from "../support/service-process";

const ROOT = join(import.meta.dir, "../..");
export const BINARY = process.env.PRICE_SERVICE_BIN?.trim() || null;

function targetUnderTest(): ServiceTarget {
  const directory = mkdtempSync(join(tmpdir(), "price-e2e-"));
  removeAfterTheRun(directory);
  if (BINARY === null) return { argv: [process.execPath, join(ROOT, "src/main.ts")], cwd: directory };
  const copy = join(directory, "price-service");
  copyFileSync(resolve(BINARY), copy);
  chmodSync(copy, 0o755);
  return { argv: [copy], cwd: directory };
}

/** What the suite runs: every test file shares it (bun test loads this module once). */
export const TARGET = targetUnderTest();

/** The files in the directory the product runs from: only the executable (or nothing, for the sources). */
export function filesBesideTheProduct(): string[] {
  return readdirSync(TARGET.cwd);
}

export interface Service {
  /** Where every request of the suite goes; `request` is the only way the suite reaches the server. */
  baseURL: string;
  /** PUBLIC_URL of the server: the origin a browser on it sends. */
  publicURL: string;
  request(path: string, init?: RequestInit): Promise<Response>;
  /** Runs a CLI command of the product on the server's database. */
  cli(args: string[], options?: { env?: Record<string, string>; stdin?: string }): Promise<CLIResult>;
  /** The instances serving (one on SQLite, two on PostgreSQL). */
  instances: ServeProcess[];
  /** What every instance printed on standard output. */
  stdout(): string;
  stop(): Promise<void>;
}

/** Instances the suite runs: a SQLite file has one server; PostgreSQL serves a fleet. */
export const INSTANCES = TEST_DATABASE_URL === null ? 1 : 2;

/**
 * Starts `serve` on a fresh database and a free loopback port. `prepare` runs CLI commands on the
 * database before the server starts (an empty database in development mode would get demo data).
 */
export async function startService(options: StartOptions = {}): Promise<Service> {
  // A free port can be taken by another process between the probe and serve's bind: try another.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startServiceOn(options.port ?? (await freePort()), options);
    } catch (error) {
      if (options.port !== undefined || attempt === 3 || !String(error).includes("is already in use")) throw error;
    }
  }
}

interface StartOptions {
  env?: Record<string, string>;
  port?: number;
  prepare?: (cli: Service["cli"]) => Promise<void>;
}

async function startServiceOn(port: number, options: StartOptions): Promise<Service> {
  const database: TestDatabase = await createTestDatabase();
  const publicURL = `http://127.0.0.1:${port}`;
  const env = {
    PUBLIC_URL: publicURL,
    PORT: String(port),
    DATABASE_URL: database.url,
    PRICE_ENV: "production",
    RATE_LIMIT: "1000000/s",
    LOG_LEVEL: "info",
    ...options.env,
  };
  const cli: Service["cli"] = (args, extra = {}) => runCLIAsync(args, { ...env, ...extra.env }, { target: TARGET, stdin: extra.stdin });
  try {
    if (options.prepare !== undefined) {
      // As an operator does: only serve, migrate and seed create a database; the other commands need one.
      const migrated = await cli(["migrate"]);
      if (migrated.code !== 0) throw new Error(`migrate failed: ${migrated.stderr}`);
      await options.prepare(cli);
    }
    const instances = await startInstances(database.url, port, env);
    const balancer = INSTANCES === 1 ? null : balance(port, instances);
    const baseURL = balancer?.url ?? instances[0]!.url;
    const direct = (path: string, init?: RequestInit) => fetch(`${baseURL}${path}`, { redirect: "manual", ...init });
    const proxy = THROUGH_PRISM ? await startPrism(baseURL) : null;
    const stdout = () => instances.map((instance) => instance.stdout()).join("");
    return {
      baseURL,
      publicURL,
      request: proxy === null ? direct : (path, init) => proxy.request(path, init, direct),
      cli,
      instances,
      stdout,
      async stop() {
        await proxy?.stop();
        await balancer?.stop();
        for (const instance of instances) instance.child.kill("SIGTERM");
        const codes = await Promise.all(instances.map((instance) => instance.child.exited));
        await database.drop();
        // The tests check every answer; this catches what no answer shows (a job that threw, a failed shutdown).
        const errors = stdout()
          .split("\n")
          .filter((line) => line.includes('"level":"error"'));
        if (codes.some((code) => code !== 0) || errors.length > 0)
          throw new Error(`serve exited ${codes.join(", ")} on SIGTERM, having logged ${errors.length} error(s):\n${errors.join("\n")}`);
      },
    };
  } catch (error) {
    await database.drop();
    throw error;
  }
}

/**
 * `serve` on the database: alone on `port`, or INSTANCES of them on ports of their own behind the
 * balancer that takes `port` (PUBLIC_URL names it, so every instance writes the same links).
 */
async function startInstances(databaseUrl: string, port: number, env: Record<string, string>): Promise<ServeProcess[]> {
  if (INSTANCES === 1) return [await spawnServe({ databaseUrl, target: TARGET, port, env })];
  return Promise.all(Array.from({ length: INSTANCES }, () => spawnServe({ databaseUrl, target: TARGET, env })));
}

/** The balancer in front of the instances; when its port is taken meanwhile, the instances stop and startService tries another. */
function balance(port: number, instances: ServeProcess[]) {
  try {
    return roundRobin(
      port,
      instances.map((instance) => instance.url),
    );
  } catch (error) {
    for (const instance of instances) instance.child.kill("SIGTERM");
    throw new Error(`port ${port} is already in use: ${String(error)}`);
  }
}

/**
 * E2E_PRISM=1: every request of the suite goes through Stoplight Prism's validating proxy, which
 * checks each answer against the /openapi.json the server serves and names what does not match in
 * an `sl-violations` header. A response violation fails the test that made the request. Two kinds of
 * request go to the server directly: those Prism answers itself without forwarding them (no
 * credential on a secured operation, a path the document does not list; such answers carry no
 * X-Request-Id), and those of operations that may redirect, because Prism's forwarder follows
 * redirects (the answer it returns is the page behind the redirect); for those the harness checks
 * that the status is one the operation documents, and that a redirect has a Location. A streamed
 * body goes directly too: it can be sent only once.
 * E2E_PRISM_REPORT names a file that gets one JSON line per service: answers validated by Prism,
 * answered directly, violations.
 */
const THROUGH_PRISM = process.env.E2E_PRISM === "1";

/** The operations of an OpenAPI document that document a redirect, with the statuses each documents. */
function redirectingOperations(document: { paths: Record<string, Record<string, { responses?: Record<string, unknown> }>> }) {
  return Object.entries(document.paths).flatMap(([path, item]) =>
    Object.entries(item).flatMap(([method, operation]) => {
      const statuses = Object.keys(operation.responses ?? {}).map(Number);
      if (!statuses.some((status) => status >= 300 && status < 400)) return [];
      return [{ method, path: new RegExp(`^${path.replace(/\{[^}]+\}/g, "[^/]+")}$`), statuses }];
    }),
  );
}

async function startPrism(upstream: string) {
  const port = await freePort();
  const document = join(mkdtempSync(join(tmpdir(), "price-prism-")), "openapi.json");
  await Bun.write(document, await (await fetch(`${upstream}/openapi.json`)).text());
  const child = Bun.spawn(
    [join(ROOT, "node_modules/.bin/prism"), "proxy", document, upstream, "--validate-request=false", "--host", "127.0.0.1", "--port", String(port)],
    { stdout: "pipe", stderr: "pipe" },
  );
  const proxyURL = `http://127.0.0.1:${port}`;
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prism exited ${child.exitCode}: ${await new Response(child.stderr).text()}`);
    if (
      await fetch(`${proxyURL}/healthz`).then(
        (response) => response.ok,
        () => false,
      )
    )
      break;
    if (Date.now() - started > 60_000) throw new Error("prism did not start within 60 s");
    await Bun.sleep(100);
  }
  const redirecting = redirectingOperations(JSON.parse(await Bun.file(document).text()));
  let validated = 0;
  let direct = 0;
  const violations: string[] = [];
  return {
    async request(path: string, init: RequestInit | undefined, send: (path: string, init?: RequestInit) => Promise<Response>): Promise<Response> {
      const method = (init?.method ?? "GET").toLowerCase();
      const statuses = redirecting.find((operation) => operation.method === method && operation.path.test(path.split("?")[0]!))?.statuses;
      // A streamed body can be sent once: if Prism answered itself, there would be none left for the server.
      if (init?.body instanceof ReadableStream) {
        direct++;
        return send(path, init);
      }
      if (statuses !== undefined) {
        direct++;
        const response = await send(path, init);
        const redirect = response.status >= 300 && response.status < 400;
        expect({
          path,
          status: response.status,
          documented: statuses.includes(response.status),
          location: redirect ? response.headers.has("location") : true,
        }).toEqual({ path, status: response.status, documented: true, location: true });
        return response;
      }
      const response = await fetch(`${proxyURL}${path}`, { redirect: "manual", ...init });
      if (!response.headers.has("x-request-id")) {
        direct++;
        await response.body?.cancel();
        return send(path, init);
      }
      validated++;
      // Request-side findings (a credential the test leaves out on purpose) are not the service's answer.
      const found = (JSON.parse(response.headers.get("sl-violations") ?? "[]") as Array<{ location: string[] }>).filter(
        (violation) => violation.location[0] === "response",
      );
      if (found.length > 0) violations.push(`${method.toUpperCase()} ${path} → ${response.status}: ${JSON.stringify(found)}`);
      expect({ path, violations: found }).toEqual({ path, violations: [] });
      return response;
    },
    async stop(): Promise<void> {
      child.kill("SIGTERM");
      await child.exited;
      rmSync(dirname(document), { recursive: true, force: true });
      if (process.env.E2E_PRISM_REPORT) appendFileSync(process.env.E2E_PRISM_REPORT, `${JSON.stringify({ validated, direct, violations })}\n`);
    },
  };
}

/** /metrics of each instance: a fleet is scraped instance by instance, and its counters add up. */
export async function scrapeEach(service: Service): Promise<string[]> {
  return Promise.all(service.instances.map(async (instance) => (await fetch(`${instance.url}/metrics`)).text()));
}

/** A series' value summed over the instances' scrapes (`series`: the name with its labels, as printed). */
export function summed(scrapes: string[], series: string): number {
  return scrapes.reduce((total, scrape) => {
    const line = scrape.split("\n").find((candidate) => candidate.startsWith(`${series} `));
    return total + (line === undefined ? 0 : Number(line.slice(series.length + 1)));
  }, 0);
}

/** `session=<token>` from a response that set the session cookie. */
export function sessionCookieOf(response: Response): string {
  const line = response.headers.getSetCookie().find((cookie) => cookie.startsWith("session="));
  if (line === undefined) throw new Error(`no session cookie in ${response.status} ${JSON.stringify(response.headers.getSetCookie())}`);
  return line.split(";")[0]!;
}

export interface SessionUser {
  id: string;
  email: string;
  name: string;
  organization: { id: string; name: string };
  role: string;
}

/** Signs `email` in through the development sign-in; returns the session cookie and the user. */
export async function developmentSignIn(service: Service, email: string): Promise<{ cookie: string; user: SessionUser }> {
  const response = await postJSON(service, "/api/v1/auth/dev-login", { email });
  if (response.status !== 200) throw new Error(`dev-login answered ${response.status}: ${await response.text()}`);
  return { cookie: sessionCookieOf(response), user: ((await response.json()) as { user: SessionUser }).user };
}

/** A POST with a JSON body (or none), as a non-browser client sends it. */
export function postJSON(service: Service, path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return service.request(path, {
    method: "POST",
    headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** One offer-feed line for `import`: a product with an offer observed `ageMs` ago, or without `merchantId` the product alone. */
export function feedLine(gtin: string, offer: { merchantId: string; price: string; ageMs: number } | null): string {
  const product = { gtin, title: `Product ${gtin}`, brand: "Acme" };
  if (offer === null) return JSON.stringify(product);
  return JSON.stringify({
    ...product,
    merchantId: offer.merchantId,
    merchantName: `Merchant ${offer.merchantId}`,
    price: offer.price,
    currency: "EUR",
    availability: "in_stock",
    observedAt: new Date(Date.now() - offer.ageMs).toISOString(),
  });
}

/** Parses a CLI command's --json output, or fails with what it printed. */
export function jsonOf<T = any>(result: CLIResult): T {
  if (result.code !== 0) throw new Error(`exit ${result.code}: ${result.stderr}${result.stdout}`);
  return JSON.parse(result.stdout) as T;
}

export interface ProblemBody {
  type: string;
  title: string;
  status: number;
  detail?: string;
  requestId: string;
  meta?: Record<string, unknown>;
}

/** Asserts that `response` is the RFC 9457 problem `slug` with `status`, and returns its body. */
export async function expectProblem(service: Service, response: Response, status: number, slug: string): Promise<ProblemBody> {
  const body = (await response.json()) as ProblemBody;
  expect({ status: response.status, type: body.type }).toEqual({ status, type: `${service.publicURL}/problems/${slug}` });
  expect(response.headers.get("content-type")).toStartWith("application/problem+json");
  expect(body.status).toBe(status);
  expect(body.requestId).toBe(response.headers.get("x-request-id")!);
  return body;
}
