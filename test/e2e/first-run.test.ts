// A new operator's first commands, through the product (the executable named by PRICE_SERVICE_BIN,
// or `bun src/main.ts`), from an empty directory that is not the project's: nothing may look like
// lost data, a wrong database or a success that was not one.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../browser/harness";
import { quickstartCommands } from "../../src/modules/dashboard/client/pages/quickstart";
import { type CLIResult, runCLIAsync, spawnServe } from "../support/service-process";
import { BINARY, feedLine, jsonOf, TARGET } from "./harness";

/** The name printed hints use: the executable's, or the sources' command line. */
const PROGRAM = BINARY === null ? "bun src/main.ts" : "price-service";
let databases: string;
let databaseUrl: string;

beforeAll(() => {
  databases = mkdtempSync(join(tmpdir(), "price-first-run-"));
  databaseUrl = `sqlite:${join(databases, "service.db")}`;
});
afterAll(() => rmSync(databases, { recursive: true, force: true }));

/** Runs the product in its own (empty) directory, with no DATABASE_URL unless given. */
function run(args: string[], options: { env?: Record<string, string>; stdin?: string } = {}): Promise<CLIResult> {
  return runCLIAsync(args, { DATABASE_URL: "", ...options.env }, { target: TARGET, stdin: options.stdin });
}

function oneLine(text: string): string {
  const lines = text.trim().split("\n");
  expect(lines).toHaveLength(1);
  return lines[0]!;
}

describe("where the database is", () => {
  test("a read command with no database fails naming the absolute default path and creates nothing", async () => {
    const result = await run(["orgs", "list"]);
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toContain(`no database at ${join(TARGET.cwd, "data/price-service.db")}`);
    expect(result.stderr).toContain("--database-url");
    expect(existsSync(join(TARGET.cwd, "data"))).toBe(false);
  });

  test("a mistyped --database-url creates no directory and names the path it looked for", async () => {
    const result = await run(["keys", "list", "--org", "org_x", "--database-url", "sqlite:/nonexistent/dir/x.db"]);
    expect(result.code).toBe(1);
    expect(oneLine(result.stderr)).toContain("no database at /nonexistent/dir/x.db");
    expect(existsSync("/nonexistent")).toBe(false);
  });

  test("migrate creates the database, and every command prints the absolute path with --verbose", async () => {
    const relative = `sqlite:./${Date.now()}/relative.db`;
    const migrated = await run(["--verbose", "migrate", "--database-url", relative]);
    expect(migrated.code).toBe(0);
    const absolute = join(TARGET.cwd, relative.slice("sqlite:./".length));
    expect(migrated.stderr).toContain(`database ${absolute}`);
    expect(existsSync(absolute)).toBe(true);
    const listed = await run(["orgs", "list", "--json", "--verbose", "--database-url", relative]);
    expect(listed.stdout.trim()).toBe("[]");
    expect(listed.stderr).toContain(`database ${absolute}`);
    rmSync(join(TARGET.cwd, relative.slice("sqlite:./".length).split("/")[0]!), { recursive: true, force: true });
  });
});

describe("command-line conventions", () => {
  beforeAll(async () => {
    expect((await run(["migrate", "--database-url", databaseUrl])).code).toBe(0);
  });

  test("global flags work before the command as well as after it", async () => {
    const created = jsonOf(await run(["--database-url", databaseUrl, "orgs", "create", "--name", "Acme", "--json"]));
    const listed = jsonOf<Array<{ id: string }>>(await run(["--json", "--database-url", databaseUrl, "orgs", "list"]));
    expect(listed.map((o) => o.id)).toContain(created.id);
  });

  test("a misspelt option is a usage error: exit 2, one line naming the option and the help", async () => {
    const result = await run(["serve", "--prot", "9000", "--database-url", databaseUrl]);
    expect(result.code).toBe(2);
    expect(result.stderr.trim().split("\n").at(-1)).toContain("'--prot'");
    expect(result.stderr).toContain(`${PROGRAM} serve --help`);
  });

  test("a negative --amount is a usage error saying the amount must be a positive whole number", async () => {
    const result = await run(["credits", "grant", "--org", "org_x", "--amount", "-5", "--database-url", databaseUrl]);
    expect(result.code).toBe(2);
    expect(oneLine(result.stderr)).toContain('--amount must be a positive whole number, got "-5"');
  });

  test("keys list of an unknown organization fails like credits grant does", async () => {
    const keys = await run(["keys", "list", "--org", "org_nope", "--database-url", databaseUrl]);
    const credits = await run(["credits", "grant", "--org", "org_nope", "--amount", "5", "--database-url", databaseUrl]);
    expect(keys.code).toBe(credits.code);
    expect(keys.code).not.toBe(0);
    expect(oneLine(keys.stderr)).toContain("organization org_nope does not exist");
  });

  test("empty lists say so, with a hint that works without Bun; --json prints []", async () => {
    const empty = `sqlite:${join(databases, "empty.db")}`;
    expect((await run(["migrate", "--database-url", empty])).code).toBe(0);
    const human = await run(["orgs", "list", "--database-url", empty]);
    expect(human.code).toBe(0);
    expect(human.stdout).toContain(`no organizations yet; create one with ${PROGRAM} orgs create --name NAME`);
    expect((await run(["orgs", "list", "--json", "--database-url", empty])).stdout.trim()).toBe("[]");
  });

  test("--help is complete offline: commands, global options, environment variables, exit codes, and no README", async () => {
    const help = await run(["--help"]);
    expect(help.code).toBe(0);
    for (const text of ["serve", "import", "backup", "--database-url", "--json", "DATABASE_URL", "OIDC_ISSUER", "STRIPE_SECRET_KEY", "Exit codes: 0"])
      expect(help.stdout).toContain(text);
    expect(help.stdout).not.toContain("README");
    const importHelp = await run(["import", "--help"]);
    for (const field of ["gtin", "merchantId", "price", "currency", "availability", "observedAt", "--allow-rejects"])
      expect(importHelp.stdout).toContain(field);
  });
});

describe("import", () => {
  const good = feedLine("4006381333931", { merchantId: "m-1", price: "2.50", ageMs: 60_000 });

  test("an import with rejected lines exits 1 after importing the good ones; --allow-rejects exits 0", async () => {
    const feed = `${good}\n{"gtin":"123"}\n`;
    const refused = await run(["import", "-", "--json", "--database-url", databaseUrl], { stdin: feed });
    expect(refused.code).toBe(1);
    expect(JSON.parse(refused.stdout)).toMatchObject({ read: 2, offers: 1, rejected: [{ line: 2 }] });
    expect(oneLine(refused.stderr)).toContain("--allow-rejects");
    const allowed = await run(["import", "-", "--allow-rejects", "--database-url", databaseUrl], { stdin: feed });
    expect(allowed.code).toBe(0);
  });

  test("CSV on standard input without --format is recognized as CSV", async () => {
    const csv = `gtin,title,merchantId,price,currency,observedAt\n4006381333931,Pencil,m-2,1.99,EUR,${new Date(Date.now() - 60_000).toISOString()}\n`;
    const result = await run(["import", "-", "--json", "--database-url", databaseUrl], { stdin: csv });
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ read: 1, offers: 1, rejected: [] });
  });
});

describe("progress lines", () => {
  beforeAll(async () => {
    expect((await run(["migrate", "--database-url", databaseUrl])).code).toBe(0);
  });

  const feed = () => {
    const path = join(databases, "long.ndjson");
    writeFileSync(path, Array.from({ length: 2500 }, (_, index) => JSON.stringify({ gtin: "4006381333931", title: `Pencil ${index}` })).join("\n"));
    return path;
  };

  /** Runs a command of the product on a pseudo-terminal (`script`), as an operator's shell does; what the terminal showed. */
  function onTerminal(args: string[]): { code: number; shown: string } {
    const quote = (arg: string) => `'${arg.replaceAll("'", "'\\''")}'`;
    const command = [...TARGET.argv, ...args].map(quote).join(" ");
    const terminal = Bun.spawnSync(["script", "-qec", command, "/dev/null"], { cwd: TARGET.cwd, env: { ...process.env, DATABASE_URL: "" } });
    return { code: terminal.exitCode, shown: terminal.stdout.toString() };
  }

  test("import shows a progress line on a terminal, and none when piped or with --json", async () => {
    const path = feed();
    const terminal = onTerminal(["import", path, "--database-url", databaseUrl]);
    expect(terminal.code).toBe(0);
    // The first batch's line is drawn at once (later ones at most every 200 ms): records, offers,
    // rejected lines, the rate and the bytes read so far.
    expect(terminal.shown).toMatch(/importing: 1000 records, 0 offers, 0 rejected, \d+ records\/s, \d+\.\d kB read/);
    const json = onTerminal(["import", path, "--database-url", databaseUrl, "--json"]);
    expect(json.code).toBe(0);
    expect(json.shown).not.toContain("importing:");
    const piped = await run(["import", path, "--database-url", databaseUrl]);
    expect(piped.code).toBe(0);
    expect(piped.stderr + piped.stdout).not.toContain("importing:");
    expect(piped.stdout).toContain("read 2500");
  });

  test("backup shows what it is copying on a terminal, and nothing of it when piped", async () => {
    const terminal = onTerminal(["backup", join(databases, "terminal-backup.db"), "--database-url", databaseUrl]);
    expect(terminal.code).toBe(0);
    expect(terminal.shown).toContain("backing up ");
    expect(terminal.shown).toContain("backup written to ");
    const piped = await run(["backup", join(databases, "piped-backup.db"), "--database-url", databaseUrl]);
    expect(piped.code).toBe(0);
    expect(piped.stderr + piped.stdout).not.toContain("backing up ");
  });
});

describe("serve", () => {
  let occupier: Server;
  let port: number;
  beforeAll(async () => {
    port = await freePort();
    occupier = createServer();
    await new Promise<void>((resolve) => occupier.listen({ port, host: "0.0.0.0" }, resolve));
  });
  afterAll(() => new Promise<void>((resolve) => occupier.close(() => resolve())));

  test("an occupied port is refused in one line naming the port, before the database is touched", async () => {
    const untouched = join(databases, "untouched.db");
    const result = await run(["serve", "--port", String(port), "--database-url", `sqlite:${untouched}`]);
    expect(result.code).toBe(1);
    expect(result.stderr.trim().split("\n").at(-1)).toContain(`port ${port} is already in use`);
    expect(existsSync(untouched)).toBe(false);
  });

  test("production without an identity provider warns at start that sign-in is not configured", async () => {
    const serve = await spawnServe({ databaseUrl, target: TARGET, env: { OIDC_ISSUER: "" } });
    try {
      await serve.waitForStderr("sign-in is not configured");
      expect(serve.stdout()).toContain(`Database: ${databaseUrl.slice("sqlite:".length)}`);
    } finally {
      serve.child.kill("SIGTERM");
      await serve.child.exited;
    }
  });
});

test("the operator guide's commands are exactly the usage lines of --help", async () => {
  const guide = readFileSync(join(import.meta.dir, "../../docs/operations.md"), "utf8");
  const section = guide.slice(guide.indexOf("## Operator CLI"));
  const block = section.slice(section.indexOf("```\n") + 4, section.indexOf("\n```", section.indexOf("```\n") + 4));
  const documented = block.split("\n").filter((line) => line.trim() !== "");
  const commands = (await run(["--help"])).stdout
    .split("Commands:\n")[1]!
    .split("\n\n")[0]!
    .split("\n")
    .map((line) => line.trim().split(/\s+/)[0]!);
  const usage: string[] = [];
  for (const command of commands) {
    const help = (await run([command, "--help"])).stdout;
    const lines = help.split("Usage:\n")[1]!.split("\n\n")[0]!.split("\n");
    usage.push(...lines.map((line) => `price-service ${line.trim().slice(PROGRAM.length + 1)}`));
  }
  expect(documented).toEqual(usage);

  // The configuration table and --help name the same environment variables.
  const table = guide.slice(guide.indexOf("| variable | default | meaning |"), guide.indexOf("## Operator CLI"));
  const mentioned = new Set([...table.matchAll(/`([A-Z][A-Z_]*)`/g)].map((match) => match[1]!));
  const rows = table
    .split("\n")
    .slice(2)
    .filter((line) => line.startsWith("|"))
    .flatMap((line) => [...line.split("|")[1]!.matchAll(/`([A-Z_]+)`/g)].map((match) => match[1]!));
  const helpSection = (await run(["--help"])).stdout.split("Environment variables:\n")[1]!.split("\n\n")[0]!;
  const helpVariables = helpSection.split("\n").map((line) => line.trim().split(/\s+/)[0]!);
  expect(helpVariables.filter((name) => !mentioned.has(name))).toEqual([]);
  expect(rows.filter((name) => !helpVariables.includes(name))).toEqual([]);
  expect(rows.length).toBeGreaterThan(10);
});

describe("the docs and the quickstart against the demo data", () => {
  test("the API reference's example GTIN, looked up with the demo key, is a billed fresh offer; so is the quickstart run as copied", async () => {
    const demoDatabase = `sqlite:${join(databases, "demo.db")}`;
    const serve = await spawnServe({ databaseUrl: demoDatabase, target: TARGET, env: { PRICE_ENV: "development" } });
    try {
      const clearKey = /Demo API key \(shown once\): (\S+)/.exec(serve.stdout())?.[1];
      expect(clearKey).toMatch(/^pps_/);
      const openapi = (await (await fetch(`${serve.url}/openapi.json`)).json()) as any;
      const parameter = openapi.paths["/api/v1/products/{gtin}/price"].get.parameters.find((p: { name: string }) => p.name === "gtin");
      const example = parameter.schema.examples?.[0] ?? parameter.example ?? parameter.schema.example;
      const answer = await fetch(`${serve.url}/api/v1/products/${example}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as any).meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1 });

      const [readSecret, price] = quickstartCommands({ name: "demo", keyPrefix: clearKey!.slice(0, 8) }, serve.url, "fr", "comment");
      const shell = Bun.spawn(["bash", "-c", `${readSecret}\n${price}`], {
        stdin: new TextEncoder().encode(`${clearKey}\n`),
        stdout: "pipe",
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      });
      const output = await new Response(shell.stdout).text();
      expect(await shell.exited).toBe(0);
      expect(JSON.parse(output).meta).toMatchObject({ reason: "fresh-offer" });
    } finally {
      serve.child.kill("SIGTERM");
      await serve.child.exited;
    }
  });
});

test("every document the README links to is in the repository, and the binary size the operator guide states is the measured one (within 2 MiB) when the executable is tested", async () => {
  const root = join(import.meta.dir, "../..");
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const guide = readFileSync(join(root, "docs/operations.md"), "utf8");
  const cited = [...readme.matchAll(/(?:\]\(|`)([\w./-]+\.md)(?:\)|`)/g)].map((match) => match[1]!);
  expect(cited.length).toBeGreaterThan(0);
  for (const document of cited) expect({ document, exists: existsSync(join(root, document)) }).toEqual({ document, exists: true });
  expect(readme).not.toMatch(/\b(SPEC|CONTRACT)\.md\b/);
  const stated = /dist\/price-service` \(([\d ]+) bytes/.exec(guide)?.[1];
  expect(stated).toBeDefined();
  if (BINARY !== null) expect(Math.abs(Number(stated!.replaceAll(" ", "")) - Bun.file(BINARY).size)).toBeLessThan(2 * 1024 * 1024);
});
