// The executable's size and its time from exec to the first answered request (GET /healthz),
// started from an empty temporary directory on an empty database (the default
// DATABASE_URL, ./data/price-service.db, so migrations run first), in production mode.
// Usage: bun bench/startup.ts [--binary dist/price-service] [--runs 10]
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";

const { values } = parseArgs({ options: { binary: { type: "string", default: "dist/price-service" }, runs: { type: "string", default: "10" } } });
const binary = resolve(values.binary!);
const runs = Number(values.runs);

function freePort(): number {
  const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = listener.port;
  listener.stop(true);
  return port;
}

async function startOnce(): Promise<number> {
  const directory = mkdtempSync(join(tmpdir(), "price-startup-"));
  const port = freePort();
  const url = `http://127.0.0.1:${port}/healthz`;
  const startedAt = performance.now();
  const child = Bun.spawn([binary, "serve"], {
    cwd: directory,
    env: { PATH: process.env.PATH ?? "", PORT: String(port), PRICE_ENV: "production", LOG_LEVEL: "warn" },
    stdout: "ignore",
    stderr: "inherit",
  });
  let elapsed = -1;
  while (performance.now() - startedAt < 10_000 && child.exitCode === null) {
    const ok = await fetch(url).then(
      (response) => response.ok,
      () => false,
    );
    if (ok) {
      elapsed = performance.now() - startedAt;
      break;
    }
    await Bun.sleep(2);
  }
  child.kill("SIGTERM");
  const code = await child.exited;
  rmSync(directory, { recursive: true, force: true });
  if (elapsed < 0) throw new Error(`${binary} did not answer within 10 s (exit ${code})`);
  if (code !== 0) throw new Error(`${binary} exited ${code} after SIGTERM`);
  return elapsed;
}

const times: number[] = [];
for (let run = 0; run < runs; run++) times.push(await startOnce());
times.sort((a, b) => a - b);
const ms = (value: number) => `${value.toFixed(0)} ms`;
console.log(`${values.binary}: ${(statSync(binary).size / 1024 / 1024).toFixed(1)} MiB`);
console.log(
  `start to first answered request (empty directory, empty database, ${runs} runs): median ${ms(times[Math.floor(runs / 2)]!)}, min ${ms(times[0]!)}, max ${ms(times.at(-1)!)}`,
);
