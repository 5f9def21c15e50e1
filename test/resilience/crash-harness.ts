// Shared by the crash test (short) and crash-soak.ts (long): serve under load, SIGKILL it
// at random moments, restart, and check the ledger after every restart.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { main } from "../../src/cli/program";
import { demoGTINsOf } from "../../src/modules/ingest/demo-data";
import { freePort } from "../browser/harness";

export interface CrashReport {
  rounds: number;
  billedAnswers: number;
  /** Look-ups sent with an Idempotency-Key and retried across crashes until answered. */
  idempotentLookups: number;
  problems: string[];
}

async function waitForHealth(url: string, deadlineMs: number): Promise<boolean> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    if (
      await fetch(`${url}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return true;
    await Bun.sleep(50);
  }
  return false;
}

/**
 * Starts `serve` on a port free at that moment (a fixed port can be taken meanwhile, by another
 * test or as the local port of any outgoing connection); its URL once /healthz answers, or null and
 * the end of its standard error.
 */
async function startServe(databaseUrl: string): Promise<{ server: ReturnType<typeof Bun.spawn>; url: string | null; stderr: () => Promise<string> }> {
  const port = await freePort();
  const server = Bun.spawn([process.execPath, "src/main.ts", "serve", "--port", String(port)], {
    env: { ...process.env, DATABASE_URL: databaseUrl, LOG_LEVEL: "error", RATE_LIMIT: "1000000/s", PRICE_ENV: "production" },
    stdout: "ignore",
    stderr: "pipe",
  });
  const url = `http://127.0.0.1:${port}`;
  const stderr = async () => (await new Response(server.stderr as ReadableStream).text()).trim().split("\n").slice(-3).join(" | ");
  return { server, url: (await waitForHealth(url, 30_000)) ? url : null, stderr };
}

export async function runCrashRounds(options: { rounds: number; clients: number; minRunMs: number; maxRunMs: number }): Promise<CrashReport> {
  const directory = mkdtempSync(join(tmpdir(), "price-crash-"));
  const databaseUrl = `sqlite:${join(directory, "crash.db")}`;
  const problems: string[] = [];
  const billed = new Set<string>();
  let seed: { organizationId: string; clearKey: string } = { organizationId: "", clearKey: "" };
  await main(["seed", "--demo", "--products", "60", "--credits", "1000000", "--json", "--database-url", databaseUrl], (text) => (seed = JSON.parse(text)));
  // A second organization whose every look-up carries an Idempotency-Key and is retried after a
  // crash until it is answered: at the end its usage rows must match its billed answers one to one.
  let keyed: { organizationId: string; clearKey: string } = { organizationId: "", clearKey: "" };
  await main(["seed", "--demo", "--products", "60", "--credits", "1000000", "--json", "--database-url", databaseUrl], (text) => (keyed = JSON.parse(text)));
  const keyedBilled = new Set<string>();
  const pending: Array<{ key: string; gtin: string }> = [];
  let idempotentLookups = 0;
  const gtins = demoGTINsOf("fresh", 60);

  /** One keyed look-up: a pending retry first, else a new one; kept pending when the server dies. */
  async function sendKeyed(target: string): Promise<void> {
    const attempt = pending.shift() ?? { key: crypto.randomUUID(), gtin: gtins[Math.floor(Math.random() * gtins.length)]! };
    try {
      const response = await fetch(`${target}/api/v1/products/${attempt.gtin}/price`, {
        headers: { authorization: `Bearer ${keyed.clearKey}`, "idempotency-key": attempt.key },
      });
      if (response.status === 409) {
        pending.push(attempt);
        await Bun.sleep(20);
        return;
      }
      const body = (await response.json()) as { meta: { requestId: string; billable: boolean } };
      idempotentLookups++;
      if (response.status === 200 && body.meta.billable) keyedBilled.add(body.meta.requestId);
    } catch {
      pending.push(attempt);
    }
  }

  try {
    for (let round = 0; round < options.rounds; round++) {
      const { server, url, stderr } = await startServe(databaseUrl);
      if (url === null) {
        server.kill("SIGKILL");
        problems.push(`round ${round}: server did not start: ${await stderr()}`);
        break;
      }
      let running = true;
      // The random kill moment counts from the round's first answer, so a slow start on a loaded machine still leaves the server under load when it dies.
      const { promise: answered, resolve: firstAnswer } = Promise.withResolvers<void>();
      const client = async () => {
        while (running) {
          const gtin = gtins[Math.floor(Math.random() * gtins.length)];
          try {
            const response = await fetch(`${url}/api/v1/products/${gtin}/price`, { headers: { authorization: `Bearer ${seed.clearKey}` } });
            firstAnswer();
            if (response.status === 200) {
              const body = (await response.json()) as { meta: { requestId: string; billable: boolean } };
              if (body.meta.billable) billed.add(body.meta.requestId);
            }
          } catch {
            // The server died under this request: it never answered 200, so it may or may not be billed.
          }
        }
      };
      const keyedClient = async () => {
        while (running) await sendKeyed(url);
      };
      const clients = [...Array.from({ length: options.clients }, client), keyedClient(), keyedClient()];
      await Promise.race([answered, Bun.sleep(10_000)]);
      await Bun.sleep(options.minRunMs + Math.random() * (options.maxRunMs - options.minRunMs));
      server.kill("SIGKILL");
      await server.exited;
      running = false;
      await Promise.all(clients);

      const store = SQLiteStore.open(databaseUrl);
      try {
        const balance = await store.getBalance(seed.organizationId, Date.now());
        if (balance.buckets.some((bucket) => bucket.remaining < 0)) problems.push(`round ${round}: a bucket is below zero`);
        let ledgerSum = 0;
        const usageByRequest = new Map<string, number>();
        let after: string | undefined;
        do {
          const page = await store.listTransactions(seed.organizationId, { limit: 100, after });
          for (const row of page.items) {
            ledgerSum += row.amount;
            if (row.type === "usage" && row.requestId) usageByRequest.set(row.requestId, (usageByRequest.get(row.requestId) ?? 0) + 1);
          }
          after = page.nextCursor ?? undefined;
        } while (after !== undefined);
        if (ledgerSum !== balance.available + balance.reserved)
          problems.push(`round ${round}: ledger sum ${ledgerSum} ≠ available ${balance.available} + reserved ${balance.reserved}`);
        for (const requestId of billed) {
          const rows = usageByRequest.get(requestId) ?? 0;
          if (rows !== 1) problems.push(`round ${round}: ${requestId} answered 200 billed but has ${rows} usage rows`);
        }
      } finally {
        await store.close();
      }
    }
    // Abandoned claims are taken over after IDEMPOTENCY_ABANDONED_MS; until then a retry gets 409.
    const { server, url, stderr } = await startServe(databaseUrl);
    try {
      if (url !== null) {
        const deadline = Date.now() + 90_000;
        while (pending.length > 0 && Date.now() < deadline) await sendKeyed(url);
        if (pending.length > 0) problems.push(`${pending.length} keyed look-ups never got an answer`);
      } else problems.push(`final server did not start: ${await stderr()}`);
    } finally {
      server.kill("SIGTERM");
      await server.exited;
    }
    const store = SQLiteStore.open(databaseUrl);
    try {
      let usageRows = 0;
      let after: string | undefined;
      do {
        const page = await store.listTransactions(keyed.organizationId, { limit: 100, after, types: ["usage"] });
        for (const row of page.items) {
          usageRows++;
          if (!keyedBilled.has(row.requestId ?? "")) problems.push(`keyed usage row ${row.id} (${row.requestId}) has no billed answer`);
        }
        after = page.nextCursor ?? undefined;
      } while (after !== undefined);
      if (usageRows !== keyedBilled.size) problems.push(`keyed organization: ${usageRows} usage rows for ${keyedBilled.size} billed answers`);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
  return { rounds: options.rounds, billedAnswers: billed.size, idempotentLookups, problems };
}
