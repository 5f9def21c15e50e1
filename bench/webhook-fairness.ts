// Webhook fairness: one organization's endpoint hangs (never answers) with BACKLOG test events
// queued; another organization then gets an event. Prints how long that event takes to reach its
// receiver while the worker runs as `serve` runs it (a tick a second, the real 10 s time-out unless
// TIMEOUT_MS says otherwise), and how many requests the hanging endpoint held open at most.
//
//   bun bench/webhook-fairness.ts                       # SQLite in memory
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test bun bench/webhook-fairness.ts   # migrates it
import { loadConfig } from "../src/config";
import { FakeClock } from "../src/lib/clock";
import { newId } from "../src/lib/ids";
import { createLogger } from "../src/lib/logger";
import { DELIVERY_TIMEOUT_MS } from "../src/modules/webhooks/dispatcher";
import { newWebhookSecret } from "../src/modules/webhooks/signature";
import { createServices, openStore } from "../src/services";

const BACKLOG = Number(process.env.BACKLOG ?? 2000);
const TIMEOUT_MS = Number(process.env.TIMEOUT_MS ?? DELIVERY_TIMEOUT_MS);
const TICK_MS = 1000;

let open = 0;
let maxOpen = 0;
const hanging = Bun.serve({
  port: 0,
  hostname: "127.0.0.1",
  idleTimeout: 0,
  fetch(request) {
    maxOpen = Math.max(maxOpen, ++open);
    return new Promise<Response>((resolve) => request.signal.addEventListener("abort", () => (open--, resolve(new Response("late")))));
  },
});
let receivedAt: number | null = null;
const healthy = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => ((receivedAt ??= performance.now()), new Response("ok")) });

const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "silent", DATABASE_URL: process.env.DATABASE_URL ?? "sqlite::memory:" });
const store = await openStore(config.databaseUrl);
const clock = new FakeClock(Date.now());
const services = createServices({ config, store, clock, logger: createLogger({ level: "silent" }), webhookDelivery: { timeoutMs: TIMEOUT_MS } });

async function organizationWithEndpoint(name: string, url: string) {
  const organization = await store.createOrganization({ name, now: clock.now() });
  const endpoint = await store.createWebhookEndpoint({
    id: newId("whe", clock.now()),
    organizationId: organization.id,
    url,
    eventTypes: ["credits.granted"],
    secret: newWebhookSecret(),
    createdAt: clock.now(),
  });
  return { organizationId: organization.id, endpointId: endpoint.id };
}

const stalled = await organizationWithEndpoint("Stalled", `http://127.0.0.1:${hanging.port}/hooks`);
for (let i = 0; i < BACKLOG; i++)
  await store.sendTestWebhookEvent(stalled.organizationId, stalled.endpointId, { eventId: newId("msg", clock.now()), now: clock.now() });
const other = await organizationWithEndpoint("Other", `http://127.0.0.1:${healthy.port}/hooks`);

// The stalled endpoint's backlog is already being worked on when the other organization's event comes.
const ticking = setInterval(() => void services.webhooks.tick().catch(() => undefined), TICK_MS);
void services.webhooks.tick();
await Bun.sleep(200);
clock.advance(1);
await store.grantCredits({
  organizationId: other.organizationId,
  source: "grant",
  type: "grant",
  amount: 5,
  expiresAt: null,
  description: "bench",
  now: clock.now(),
});
const queuedAt = performance.now();
while (receivedAt === null && performance.now() - queuedAt < 3 * TIMEOUT_MS) await Bun.sleep(5);
clearInterval(ticking);

const waited = receivedAt === null ? null : Math.round(receivedAt - queuedAt);
console.log(`store ${store.dialect}, ${BACKLOG} events queued for a hanging endpoint, time-out ${TIMEOUT_MS} ms, a tick every ${TICK_MS} ms`);
console.log(`another organization's event reached its receiver after ${waited === null ? `more than ${3 * TIMEOUT_MS}` : waited} ms`);
console.log(`requests the hanging endpoint held open at most: ${maxOpen}`);

await services.webhooks.drain();
await store.close();
hanging.stop(true);
healthy.stop(true);
