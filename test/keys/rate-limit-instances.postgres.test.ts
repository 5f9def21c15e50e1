import { afterEach, beforeEach, expect, test } from "bun:test";
import { createApp } from "../../src/app";
import { loadConfig } from "../../src/config";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { systemClock } from "../../src/lib/clock";
import { createLogger } from "../../src/lib/logger";
import { createApiKey } from "../../src/modules/keys/service";
import { createServices, type Services } from "../../src/services";
import { BASE, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// A key's rate limit across two instances on one PostgreSQL database, on the wall clock: the
// instances lease the key's tokens from one shared bucket, so together they admit what one would.
const RATE = 20;
const UNKNOWN_GTIN = "4006381333931";

let stores: TwoStores;
let services: Services[];
let clearKey: string;
let logs: string[];

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  logs = [];
  const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "info", RATE_LIMIT: "1000/s", ORG_RATE_LIMIT: "1000/s" });
  const logger = createLogger({ level: config.logLevel, write: (chunk) => logs.push(chunk) });
  services = [stores.one, stores.two].map((store) => createServices({ config, store, clock: systemClock, logger }));
  await stores.one.ensureSystemUser(Date.now());
  ({ clearKey } = await createApiKey(stores.one, {
    organizationId: stores.organizationId,
    name: "limited",
    createdBy: SYSTEM_USER_ID,
    keyPrefix: "pps_",
    now: Date.now(),
    rateLimit: RATE,
  }));
});

afterEach(() => stores.close());

/** Requests from `lanes` concurrent clients, alternating between the instances, until `until` (or the first 429); the answers and which instance gave each. */
async function hammer(until: number, lanes = 4, untilRefused = false): Promise<Array<Response & { instance: number }>> {
  const apps = services.map((each) => createApp(each));
  const answers: Array<Response & { instance: number }> = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: lanes }, async () => {
      while (Date.now() < until && !(untilRefused && answers.some((answer) => answer.status === 429))) {
        const instance = next++ % apps.length;
        const answer = await apps[instance]!.handle(
          new Request(`${BASE}/api/v1/products/${UNKNOWN_GTIN}/price`, { headers: { authorization: `Bearer ${clearKey}` } }),
        );
        await answer.arrayBuffer();
        answers.push(Object.assign(answer, { instance }));
      }
    }),
  );
  return answers;
}

/** The RateLimit fields every answer carries agree with each other and with its status. */
function expectConsistentFields(answer: Response): void {
  const fields = /^"(key|organization)";r=(\d+);t=(\d+)$/.exec(answer.headers.get("ratelimit") ?? "");
  expect(fields).not.toBeNull();
  const [, policy, remaining, reset] = fields!;
  expect(Number(remaining)).toBeLessThanOrEqual(policy === "key" ? RATE : 1000);
  if (answer.status === 429) {
    expect(Number(answer.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(answer.headers.get("retry-after")).toBe(reset!);
  } else {
    expect(answer.headers.get("retry-after")).toBeNull();
  }
}

test(`a key limited to ${RATE}/s gets at most 1.1 × ${RATE} a second through two instances together, with consistent RateLimit fields`, async () => {
  // Spend the burst first (the bucket holds two seconds' worth), then measure the steady rate.
  const burst = await hammer(Date.now() + 10_000, 4, true);
  expect(burst.some((answer) => answer.status === 429)).toBe(true);
  const startedAt = Date.now();
  const answers = await hammer(startedAt + 2000);
  const seconds = (Date.now() - startedAt) / 1000;
  const admitted = answers.filter((answer) => answer.status !== 429).length;
  // More asked than allowed all along.
  expect(answers.some((answer) => answer.status === 429)).toBe(true);
  expect(admitted).toBeLessThanOrEqual(1.1 * RATE * seconds + 1);
  expect(admitted).toBeGreaterThanOrEqual(0.5 * RATE * seconds);
  for (const answer of [...burst, ...answers]) expectConsistentFields(answer);
  // Both instances admitted some: the rate is shared, not held by one of them.
  for (const instance of [0, 1]) expect(answers.some((answer) => answer.instance === instance && answer.status !== 429)).toBe(true);
});

test("what an idle instance leased goes back to the shared bucket when it prunes, for the other instance to spend", async () => {
  const [one, two] = services as [Services, Services];
  const [oneApp, twoApp] = [createApp(one), createApp(two)];
  const ask = (app: ReturnType<typeof createApp>) =>
    app.handle(new Request(`${BASE}/api/v1/products/${UNKNOWN_GTIN}/price`, { headers: { authorization: `Bearer ${clearKey}` } }));
  // The organization's policy (1000/s) leases 50 tokens at a time: one request leaves 49 with instance one.
  expect((await ask(oneApp)).status).not.toBe(429);
  const organizationTokens = async () =>
    (await queryRows<{ tokens: number }>(stores.one, "SELECT tokens FROM rate_limit_buckets WHERE bucket = ?", [stores.organizationId])).at(0)!.tokens;
  const before = await organizationTokens();
  await one.rateLimiter.prune(Date.now() + 60_000);
  expect(await organizationTokens()).toBeCloseTo(Math.min(2000, before + 49), 0);
  expect((await ask(twoApp)).status).not.toBe(429);
});

test("while the shared buckets cannot be read, each instance limits on its own and says so once in the log", async () => {
  await queryRows(stores.one, "ALTER FUNCTION lease_rate_tokens RENAME TO lease_rate_tokens_away");
  const answers = await hammer(Date.now() + 10_000, 2, true);
  expect(answers.every((answer) => answer.status !== 500)).toBe(true);
  // Each instance alone: a burst of 2 × RATE each, and what refilled meanwhile.
  expect(answers.filter((answer) => answer.status !== 429).length).toBeLessThanOrEqual(2 * 2 * RATE + 2 * RATE * 10);
  expect(answers.some((answer) => answer.status === 429)).toBe(true);
  expect(logs.filter((line) => line.includes("shared rate limits unreachable")).length).toBe(2);
  await queryRows(stores.one, "ALTER FUNCTION lease_rate_tokens_away RENAME TO lease_rate_tokens");
  await Bun.sleep(100);
  await hammer(Date.now() + 100, 1);
  expect(logs.filter((line) => line.includes("shared rate limits reachable again")).length).toBeGreaterThanOrEqual(1);
});
