// Fair delivery on whichever store the suite runs: a hanging endpoint of one organization never holds
// back another's events; claims respect per-endpoint and per-organization limits across instances;
// test events are rate limited; an endpoint's backlog is bounded.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { BACKLOG_DROPPED, MAX_PENDING_PER_ENDPOINT } from "../../src/db/webhooks/records";
import { newId } from "../../src/lib/ids";
import { DELIVERY_LIMITS } from "../../src/modules/webhooks/dispatcher";
import { newWebhookSecret } from "../../src/modules/webhooks/signature";
import { createTestContext, json, queryRows, signIn, type TestContext } from "../support/context";
import { startReceiver, type Receiver } from "./receiver";

const WEBHOOKS = "/api/v1/customer/webhooks";
let context: TestContext;
let receiver: Receiver;
let hanging: { url: string; open: () => number; maxOpen: () => number; stop: () => void };

/** A receiver that never answers: each request stays open until the dispatcher gives up on it. */
function startHangingReceiver() {
  let open = 0;
  let maxOpen = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    fetch(request) {
      open++;
      maxOpen = Math.max(maxOpen, open);
      return new Promise<Response>((resolve) => request.signal.addEventListener("abort", () => (open--, resolve(new Response("late")))));
    },
  });
  return { url: `http://127.0.0.1:${server.port}/hooks`, open: () => open, maxOpen: () => maxOpen, stop: () => server.stop(true) };
}

beforeEach(async () => {
  context = await createTestContext({}, { webhookDelivery: { timeoutMs: 3000 } });
  receiver = startReceiver();
  hanging = startHangingReceiver();
});
afterEach(async () => {
  await context.services.webhooks.drain();
  hanging.stop();
  await receiver.stop();
  await context.close();
});

async function organizationWithEndpoint(name: string, url: string): Promise<{ organizationId: string; endpointId: string }> {
  const { store, clock } = context;
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

async function addEndpoint(organizationId: string, url: string): Promise<string> {
  const { store, clock } = context;
  return (
    await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId,
      url,
      eventTypes: ["credits.granted"],
      secret: newWebhookSecret(),
      createdAt: clock.now(),
    })
  ).id;
}

/** `count` test events for one endpoint in one statement (a recursive series works on both stores). */
async function queueTestEvents(organizationId: string, endpointId: string, count: number, createdAt = context.clock.now()): Promise<void> {
  const prefix = `msg_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const series = `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})`;
  await queryRows(
    context.store,
    `${series} INSERT INTO webhook_events (id, organization_id, type, payload, created_at) SELECT CAST(? AS text) || '_' || i, ?, 'webhook.test', '{}', CAST(? AS bigint) FROM n`,
    [prefix, organizationId, createdAt],
  );
  await queryRows(
    context.store,
    `${series} INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at) SELECT ?, CAST(? AS text) || '_' || i, 'pending', 0, CAST(? AS bigint) + i, CAST(? AS bigint) + i FROM n`,
    [endpointId, prefix, createdAt, createdAt],
  );
}

function grant(organizationId: string) {
  return context.store.grantCredits({
    organizationId,
    source: "grant",
    type: "grant",
    amount: 5,
    expiresAt: null,
    description: "grant",
    now: context.clock.now(),
  });
}

describe("fair delivery", () => {
  test("with 2 000 events queued for a hanging endpoint of one organization, another organization's event is delivered within 2 s", async () => {
    const stalled = await organizationWithEndpoint("Stalled", hanging.url);
    await queueTestEvents(stalled.organizationId, stalled.endpointId, 2000);
    const other = await organizationWithEndpoint("Other", receiver.url);
    context.clock.advance(60_000);
    await grant(other.organizationId);

    const startedAt = performance.now();
    // Ticks as `serve` makes them, without waiting for one another.
    const ticking = setInterval(() => void context.services.webhooks.tick().catch(() => undefined), 50);
    try {
      while (receiver.received.length === 0 && performance.now() - startedAt < 5000) await Bun.sleep(10);
    } finally {
      clearInterval(ticking);
    }
    const elapsed = performance.now() - startedAt;
    expect(receiver.received.map((request) => JSON.parse(request.body).type)).toEqual(["credits.granted"]);
    expect(elapsed).toBeLessThan(2000);
    // The hanging endpoint held no more than its share of the pool.
    expect(hanging.maxOpen()).toBeLessThanOrEqual(DELIVERY_LIMITS.perEndpoint);
  }, 20_000);

  test("a claim goes round-robin over endpoints, oldest first within one, under the per-endpoint and per-organization limits of every instance's leases", async () => {
    const big = await organizationWithEndpoint("Big", hanging.url);
    const endpoints = [big.endpointId, ...(await Promise.all([1, 2, 3].map(() => addEndpoint(big.organizationId, hanging.url))))];
    for (const endpointId of endpoints) await queueTestEvents(big.organizationId, endpointId, 4);
    context.clock.advance(1000);
    const small = await organizationWithEndpoint("Small", receiver.url);
    await queueTestEvents(small.organizationId, small.endpointId, 1);
    context.clock.advance(1000);

    const claim = (owner: string, limit: number) =>
      context.store.claimWebhookDeliveries({ owner, now: context.clock.now(), leaseMs: 60_000, limit, ...DELIVERY_LIMITS });
    const first = await claim("dsp_one", 20);
    const perEndpoint = (claimed: Array<{ endpointId: string }>) =>
      endpoints.map((endpointId) => claimed.filter((delivery) => delivery.endpointId === endpointId).length);
    // Big gets perOrganization (5) of its 16, no endpoint more than 2; Small's newer event is not held back.
    expect(first.filter((delivery) => delivery.endpointId === small.endpointId)).toHaveLength(1);
    expect(first.filter((delivery) => delivery.endpointId !== small.endpointId)).toHaveLength(DELIVERY_LIMITS.perOrganization);
    expect(Math.max(...perEndpoint(first))).toBeLessThanOrEqual(DELIVERY_LIMITS.perEndpoint);
    // Round-robin: the first claimed of each endpoint is its oldest delivery, and the first four go to four endpoints.
    expect(new Set(first.slice(0, 4).map((delivery) => delivery.endpointId)).size).toBe(4);
    for (const endpointId of endpoints) {
      const ids = first.filter((delivery) => delivery.endpointId === endpointId).map((delivery) => delivery.eventId);
      expect(ids).toEqual(ids.toSorted((a, b) => Number(a.split("_").at(-1)) - Number(b.split("_").at(-1))));
      if (ids.length > 0) expect(ids[0]).toEndWith("_1");
    }
    // Another instance counts those leases: Big has no slot left.
    expect(await claim("dsp_two", 20)).toEqual([]);
  });

  test("a freed slot is filled at once, without waiting for the next tick", async () => {
    const { organizationId } = await organizationWithEndpoint("Busy", receiver.url);
    for (let i = 0; i < 5; i++) await grant(organizationId);
    expect(await context.services.webhooks.tick()).toBe(DELIVERY_LIMITS.perEndpoint);
    const deadline = performance.now() + 2000;
    while (receiver.received.length < 5 && performance.now() < deadline) await Bun.sleep(10);
    expect(receiver.received).toHaveLength(5);
    expect(new Set(receiver.received.map((request) => request.id)).size).toBe(5);
  });
});

describe("test events and the backlog", () => {
  test("test events are rate limited per organization: 429 rate-limited with Retry-After, and nothing queued", async () => {
    const ada = await signIn(context, "ada@example.com");
    const created = await context.request(WEBHOOKS, {
      method: "POST",
      headers: { ...ada.headers, "content-type": "application/json" },
      body: JSON.stringify({ url: receiver.url, eventTypes: ["key.created"] }),
    });
    const { endpoint } = await json(created);
    const send = () => context.request(`${WEBHOOKS}/${endpoint.id}/test`, { method: "POST", headers: ada.headers });
    const statuses: number[] = [];
    let refused: Response | null = null;
    for (let i = 0; i < 30 && refused === null; i++) {
      const response = await send();
      statuses.push(response.status);
      if (response.status === 429) refused = response;
    }
    expect(statuses.filter((status) => status === 202).length).toBeGreaterThanOrEqual(10);
    expect(refused).not.toBeNull();
    expect(refused!.headers.get("content-type")).toStartWith("application/problem+json");
    expect(Number(refused!.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(await json(refused!)).toMatchObject({ status: 429, type: expect.stringMatching(/rate-limited$/), detail: expect.stringContaining("test events") });
    const [row] = await queryRows<{ n: number }>(context.store, "SELECT count(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?", [endpoint.id]);
    expect(Number(row!.n)).toBe(statuses.length - 1);

    // Once the window has passed, test events are accepted again.
    context.clock.advance(Number(refused!.headers.get("retry-after")) * 1000);
    expect((await send()).status).toBe(202);
  });

  test(`an endpoint keeps at most ${MAX_PENDING_PER_ENDPOINT} pending deliveries: the worker fails the oldest past it, which the log shows as dropped`, async () => {
    const { organizationId, endpointId } = await organizationWithEndpoint("Backlogged", receiver.url);
    await queueTestEvents(organizationId, endpointId, MAX_PENDING_PER_ENDPOINT, context.clock.now() - 10_000);
    await grant(organizationId);
    await context.services.webhooks.tick();
    await context.services.webhooks.drain();
    const counts = await queryRows<{ state: string; n: number }>(
      context.store,
      "SELECT state, count(*) AS n FROM webhook_deliveries WHERE endpoint_id = ? GROUP BY state ORDER BY state",
      [endpointId],
    );
    const count = (state: string) => Number(counts.find((row) => row.state === state)?.n ?? 0);
    expect(count("failed")).toBe(1);
    expect(count("delivered") + count("pending")).toBe(MAX_PENDING_PER_ENDPOINT);
    const [dropped] = await queryRows<{ event_id: string; last_response: string; next_attempt_at: number | null }>(
      context.store,
      "SELECT event_id, last_response, next_attempt_at FROM webhook_deliveries WHERE endpoint_id = ? AND state = 'failed'",
      [endpointId],
    );
    expect(dropped).toMatchObject({ last_response: BACKLOG_DROPPED, next_attempt_at: null });
    expect(dropped!.event_id).toEndWith("_1");
    context.services.logger.flush();
    expect(context.logs.join("")).toContain('"message":"webhook backlog dropped"');
    // The newest event, the grant's, is kept (and waits its turn: oldest first within the endpoint).
    const [granted] = await queryRows<{ state: string }>(
      context.store,
      "SELECT d.state FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id WHERE d.endpoint_id = ? AND e.type = 'credits.granted'",
      [endpointId],
    );
    expect(granted).toEqual({ state: "pending" });
  });
});
