// Delivery of the outbox to a real receiver on a loopback port (allowed in development mode), on
// whichever store the suite runs: signatures, retries, redirects, disabling, SSRF refusals,
// crashes and two instances.
import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { DAY_MS, type Store } from "../../src/db/store";
import { FakeClock } from "../../src/lib/clock";
import { newId } from "../../src/lib/ids";
import { createLogger } from "../../src/lib/logger";
import { createAddressPolicy, createOutboundClient } from "../../src/lib/outbound";
import { DELIVERY_LIMITS, RETRY_SCHEDULE_MS, RESPONSE_EXCERPT_BYTES, WebhookDispatcher } from "../../src/modules/webhooks/dispatcher";
import { newWebhookSecret } from "../../src/modules/webhooks/signature";
import { openStore } from "../../src/services";
import { createTestContext, createTestDatabase, json, queryRows, signIn, twoStoresOnOneDatabase, type TestContext, type TestSession } from "../support/context";
import { startReceiver, type Receiver } from "./receiver";

const WEBHOOKS = "/api/v1/customer/webhooks";
const silent = createLogger({ level: "silent", write: () => {} });
const loopbackOutbound = (fetch?: typeof globalThis.fetch) =>
  createOutboundClient({ policy: createAddressPolicy({ allowedNetworks: [], allowLoopback: true }), fetch });

let context: TestContext;
let receiver: Receiver;
let ada: TestSession;

beforeEach(async () => {
  context = await createTestContext();
  receiver = startReceiver();
  ada = await signIn(context, "ada@example.com");
});

afterEach(async () => {
  await receiver.stop();
  await context.close();
});

function post(path: string, body?: unknown): Promise<Response> {
  return context.request(path, {
    method: "POST",
    headers: { ...ada.headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function createEndpoint(eventTypes: string[], url = receiver.url): Promise<{ endpoint: { id: string }; secret: string }> {
  const response = await post(WEBHOOKS, { url, eventTypes });
  expect(response.status).toBe(201);
  return json(response);
}

async function deliveryLog(endpointId: string): Promise<any[]> {
  const response = await context.request(`${WEBHOOKS}/${endpointId}/deliveries`, { headers: ada.headers });
  expect(response.status).toBe(200);
  return (await json(response)).items;
}

async function createKey(name = "production"): Promise<string> {
  const response = await post("/api/v1/customer/api-keys", { name });
  expect(response.status).toBe(201);
  return (await json(response)).key.id;
}

function verify(secret: string, index = 0): any {
  const request = receiver.received[index]!;
  return new Webhook(secret).verify(request.body, { "webhook-id": request.id, "webhook-timestamp": request.timestamp, "webhook-signature": request.signature });
}

describe("delivery", () => {
  test("an event reaches the receiver signed the Standard Webhooks way, and the log says delivered", async () => {
    const { endpoint, secret } = await createEndpoint(["key.created"]);
    const keyId = await createKey();
    expect(await context.services.webhooks.tick()).toBe(1);
    expect(receiver.received).toHaveLength(1);
    const payload = verify(secret);
    expect(payload).toEqual({
      type: "key.created",
      timestamp: new Date(context.clock.now()).toISOString(),
      data: { organizationId: ada.organizationId, keyId, name: "production", keyPrefix: expect.any(String) },
    });
    expect(receiver.received[0]!.id).toStartWith("msg_");
    expect(receiver.received[0]!.headers["content-type"]).toBe("application/json");
    expect(await deliveryLog(endpoint.id)).toEqual([
      {
        eventId: receiver.received[0]!.id,
        eventType: "key.created",
        state: "delivered",
        attempts: 1,
        lastStatus: 200,
        lastResponse: "ok",
        lastAttemptAt: new Date(context.clock.now()).toISOString(),
        nextAttemptAt: null,
        createdAt: new Date(context.clock.now()).toISOString(),
      },
    ]);
    expect(await context.services.webhooks.tick()).toBe(0);
    expect(receiver.received).toHaveLength(1);
  });

  test("a receiver down for a while is retried with back-off and gets the event once it is back", async () => {
    const { endpoint, secret } = await createEndpoint(["key.created"]);
    await createKey();
    receiver.answer(503, "x".repeat(1000));
    await context.services.webhooks.tick();
    let [line] = await deliveryLog(endpoint.id);
    expect(line).toMatchObject({
      state: "pending",
      attempts: 1,
      lastStatus: 503,
      nextAttemptAt: new Date(context.clock.now() + RETRY_SCHEDULE_MS[0]).toISOString(),
    });
    expect(line.lastResponse).toBe("x".repeat(RESPONSE_EXCERPT_BYTES));
    // Not due yet: nothing is sent.
    expect(await context.services.webhooks.tick()).toBe(0);
    context.clock.advance(RETRY_SCHEDULE_MS[0]);
    await context.services.webhooks.tick();
    [line] = await deliveryLog(endpoint.id);
    expect(line).toMatchObject({ state: "pending", attempts: 2, nextAttemptAt: new Date(context.clock.now() + RETRY_SCHEDULE_MS[1]).toISOString() });
    const failing = await json(await context.request(`${WEBHOOKS}/${endpoint.id}`, { headers: ada.headers }));
    expect(failing.failingSince).not.toBeNull();

    receiver.answer(200);
    context.clock.advance(RETRY_SCHEDULE_MS[1]);
    await context.services.webhooks.tick();
    [line] = await deliveryLog(endpoint.id);
    expect(line).toMatchObject({ state: "delivered", attempts: 3, lastStatus: 200, nextAttemptAt: null });
    expect(receiver.received).toHaveLength(3);
    expect(new Set(receiver.received.map((request) => request.id)).size).toBe(1);
    expect(verify(secret, 2).type).toBe("key.created");
    expect(await json(await context.request(`${WEBHOOKS}/${endpoint.id}`, { headers: ada.headers }))).toMatchObject({ status: "enabled", failingSince: null });
  });

  test("a redirect is not followed: it is a failed attempt", async () => {
    const { endpoint } = await createEndpoint(["key.created"]);
    await createKey();
    receiver.answer(302, "");
    await context.services.webhooks.tick();
    expect(await deliveryLog(endpoint.id)).toMatchObject([{ state: "pending", attempts: 1, lastStatus: 302 }]);
    expect(receiver.received).toHaveLength(1);
  });

  test("an endpoint failing for a day is disabled, its delivery failed, and nothing more is queued for it", async () => {
    const { endpoint } = await createEndpoint(["key.created", "key.revoked"]);
    await createKey();
    receiver.answer(500);
    const start = context.clock.now();
    await context.services.webhooks.tick();
    for (const pause of RETRY_SCHEDULE_MS) {
      context.clock.advance(pause);
      expect(await context.services.webhooks.tick()).toBe(1);
    }
    expect(context.clock.now() - start).toBeGreaterThanOrEqual(DAY_MS);
    ada = await signIn(context, "ada@example.com"); // the session of a day ago has expired
    expect(await deliveryLog(endpoint.id)).toMatchObject([{ state: "failed", attempts: RETRY_SCHEDULE_MS.length + 1, lastStatus: 500, nextAttemptAt: null }]);
    const disabled = await json(await context.request(`${WEBHOOKS}/${endpoint.id}`, { headers: ada.headers }));
    expect(disabled).toMatchObject({ status: "disabled", disabledAt: new Date(context.clock.now()).toISOString() });
    await createKey("another");
    expect(await deliveryLog(endpoint.id)).toHaveLength(1);
    const test = await post(`${WEBHOOKS}/${endpoint.id}/test`);
    expect(test.status).toBe(409);

    // Fixed and enabled again: new events are queued and delivered; what failed stays failed.
    const enabled = await post(`${WEBHOOKS}/${endpoint.id}/enable`);
    expect(enabled.status).toBe(200);
    expect(await json(enabled)).toMatchObject({ status: "enabled", failingSince: null, disabledAt: null });
    receiver.answer(200);
    const keyId = await createKey("after the fix");
    await context.services.webhooks.tick();
    expect(JSON.parse(receiver.received.at(-1)!.body).data.keyId).toBe(keyId);
    expect((await deliveryLog(endpoint.id)).map((line) => line.state)).toEqual(["delivered", "failed"]);
  });

  test("a test event is delivered to its endpoint only", async () => {
    const one = await createEndpoint(["key.created"]);
    const two = await createEndpoint(["key.created"]);
    const response = await post(`${WEBHOOKS}/${one.endpoint.id}/test`);
    expect(response.status).toBe(202);
    const { eventId } = await json(response);
    await context.services.webhooks.tick();
    expect(receiver.received.map((request) => request.id)).toEqual([eventId]);
    expect(verify(one.secret)).toMatchObject({ type: "webhook.test", data: { organizationId: ada.organizationId, endpointId: one.endpoint.id } });
    expect(await deliveryLog(two.endpoint.id)).toEqual([]);
  });

  test("after a secret rotation both secrets verify for a day", async () => {
    const { endpoint, secret } = await createEndpoint(["key.created"]);
    const rotated = await json(await post(`${WEBHOOKS}/${endpoint.id}/rotate-secret`));
    expect(rotated.secret).not.toBe(secret);
    await createKey();
    await context.services.webhooks.tick();
    expect(verify(secret).type).toBe("key.created");
    expect(verify(rotated.secret).type).toBe("key.created");
    context.clock.advance(DAY_MS + 1);
    ada = await signIn(context, "ada@example.com"); // the session of a day ago has expired
    await createKey("later");
    await context.services.webhooks.tick();
    expect(verify(rotated.secret, 1).type).toBe("key.created");
    expect(() => verify(secret, 1)).toThrow();
  });
});

describe("addresses webhooks never reach", () => {
  function productionDispatcher(resolve: (hostname: string) => Promise<string[]>): WebhookDispatcher {
    const policy = createAddressPolicy({ allowedNetworks: [], allowLoopback: false });
    return new WebhookDispatcher({
      store: context.store,
      clock: context.clock,
      logger: silent,
      outbound: createOutboundClient({ policy, resolve }),
      userAgent: "test",
    });
  }

  async function endpointFor(url: string): Promise<string> {
    const { store, clock } = context;
    const endpoint = await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId: ada.organizationId,
      url,
      eventTypes: ["key.created"],
      secret: newWebhookSecret(),
      createdAt: clock.now(),
    });
    return endpoint.id;
  }

  test("a name resolving to a private address is refused without a request", async () => {
    const endpointId = await endpointFor("https://internal.example/hook");
    await createKey();
    await productionDispatcher(async () => ["93.184.216.34", "10.0.0.7"]).tick();
    const [line] = await deliveryLog(endpointId);
    expect(line).toMatchObject({ state: "pending", attempts: 1, lastStatus: null });
    expect(line.lastResponse).toContain("10.0.0.7 refused");
  });

  test("a name is resolved once and the request goes to the checked address, with the name in the Host header", async () => {
    const port = new URL(receiver.url).port;
    const endpointId = await endpointFor(`http://hooks.customer.test:${port}/hooks`);
    await createKey();
    const policy = createAddressPolicy({ allowedNetworks: ["127.0.0.1/32"], allowLoopback: false });
    const resolve = async (hostname: string) => (hostname === "hooks.customer.test" ? ["127.0.0.1"] : []);
    expect(
      await new WebhookDispatcher({
        store: context.store,
        clock: context.clock,
        logger: silent,
        outbound: createOutboundClient({ policy, resolve }),
        userAgent: "test",
      }).tick(),
    ).toBe(1);
    expect((await deliveryLog(endpointId))[0]).toMatchObject({ state: "delivered", lastStatus: 200 });
    expect(receiver.received.map((request) => request.headers.host)).toEqual([`hooks.customer.test:${port}`]);
  });

  test("in production a loopback receiver is refused, by name or address, and gets nothing", async () => {
    const byName = await endpointFor(receiver.url.replace("127.0.0.1", "localhost"));
    const byAddress = await endpointFor(receiver.url);
    await createKey();
    await productionDispatcher(async () => ["127.0.0.1", "::1"]).tick();
    for (const endpointId of [byName, byAddress]) expect((await deliveryLog(endpointId))[0]).toMatchObject({ attempts: 1, lastStatus: null });
    expect(receiver.received).toEqual([]);
  });
});

describe("crashes and instances", () => {
  function dispatcher(store: Store, clock: FakeClock): WebhookDispatcher {
    return new WebhookDispatcher({ store, clock, logger: silent, outbound: loopbackOutbound(), userAgent: "test" });
  }

  async function addEndpoint(store: Store, organizationId: string, clock: FakeClock): Promise<string> {
    const endpoint = await store.createWebhookEndpoint({
      id: newId("whe", clock.now()),
      organizationId,
      url: receiver.url,
      eventTypes: ["credits.granted"],
      secret: newWebhookSecret(),
      createdAt: clock.now(),
    });
    return endpoint.id;
  }

  function grant(store: Store, organizationId: string, clock: FakeClock) {
    return store.grantCredits({ organizationId, source: "grant", type: "grant", amount: 5, expiresAt: null, description: "grant", now: clock.now() });
  }

  test("a tick ends only when all its deliveries are recorded, even when recording one of them fails", async () => {
    const { store, clock } = context;
    const organization = await store.createOrganization({ name: "Flaky", now: clock.now() });
    await addEndpoint(store, organization.id, clock);
    for (let i = 0; i < 2; i++) await grant(store, organization.id, clock);
    // The first attempt's record fails (its database write), the second's receiver answers later.
    let releaseSlow!: () => void;
    const slow = new Promise<void>((resolve) => (releaseSlow = resolve));
    let calls = 0;
    let recordFailed!: () => void;
    const failedRecord = new Promise<void>((resolve) => (recordFailed = resolve));
    const flakyStore = new Proxy(store, {
      get(target, property, receiving) {
        if (property === "finishWebhookDelivery") {
          return () => {
            recordFailed();
            return Promise.reject(new Error("could not write (injected)"));
          };
        }
        const value = Reflect.get(target, property, receiving);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const fetchOnce = (async () => {
      if (calls++ === 1) await slow;
      return new Response("ok");
    }) as unknown as typeof fetch;
    const flaky = new WebhookDispatcher({ store: flakyStore, clock, logger: silent, outbound: loopbackOutbound(fetchOnce), userAgent: "test" });
    let settled = false;
    const ticking = flaky.tick().then(
      () => (settled = true),
      () => (settled = true),
    );
    await failedRecord;
    await new Promise((resolve) => setImmediate(resolve));
    // The slow delivery is still being sent: the tick (and drain at shutdown) must wait for it.
    expect(settled).toBe(false);
    releaseSlow();
    await ticking;
    expect(calls).toBe(2);
  });

  test("an event whose cause committed before a crash is delivered after the restart", async () => {
    const database = await createTestDatabase();
    const clock = new FakeClock();
    try {
      const before = await openStore(database.url);
      const organization = await before.createOrganization({ name: "Crashing", now: clock.now() });
      await addEndpoint(before, organization.id, clock);
      await grant(before, organization.id, clock);
      await before.close(); // the instance dies before its worker ran

      const after = await openStore(database.url);
      try {
        expect(await dispatcher(after, clock).tick()).toBe(1);
        expect(receiver.received).toHaveLength(1);
        expect(JSON.parse(receiver.received[0]!.body)).toMatchObject({ type: "credits.granted", data: { organizationId: organization.id, amount: 5 } });
      } finally {
        await after.close();
      }
    } finally {
      await database.drop();
    }
  });

  test("a delivery claimed by an instance that died is sent by another once the lease ends", async () => {
    const stores = await twoStoresOnOneDatabase();
    try {
      const endpointId = await addEndpoint(stores.one, stores.organizationId, stores.clock);
      await grant(stores.one, stores.organizationId, stores.clock);
      // Instance one claims the delivery and dies before sending it.
      expect(
        await stores.one.claimWebhookDeliveries({ owner: "dsp_dead", now: stores.clock.now(), leaseMs: 60_000, limit: 10, ...DELIVERY_LIMITS }),
      ).toHaveLength(1);
      const survivor = dispatcher(stores.two, stores.clock);
      expect(await survivor.tick()).toBe(0);
      await queryRows(stores.two, "UPDATE webhook_deliveries SET lease_until = lease_until - 120000");
      expect(await survivor.tick()).toBe(1);
      expect(receiver.received).toHaveLength(1);
      expect(await queryRows(stores.one, "SELECT state FROM webhook_deliveries")).toEqual([{ state: "delivered" }]);
      // The dead instance's late report changes nothing.
      expect(
        await stores.one.finishWebhookDelivery({
          endpointId,
          eventId: receiver.received[0]!.id,
          owner: "dsp_dead",
          now: stores.clock.now(),
          delivered: false,
          status: 500,
          response: null,
          nextAttemptAt: null,
          disableAfterMs: DAY_MS,
        }),
      ).toBe(false);
    } finally {
      await stores.close();
    }
  });

  test("two instances ticking together deliver each event exactly once", async () => {
    const stores = await twoStoresOnOneDatabase();
    try {
      await addEndpoint(stores.one, stores.organizationId, stores.clock);
      for (let i = 0; i < 30; i++) await grant(i % 2 === 0 ? stores.one : stores.two, stores.organizationId, stores.clock);
      const one = dispatcher(stores.one, stores.clock);
      const two = dispatcher(stores.two, stores.clock);
      // Each endpoint has at most DELIVERY_LIMITS.perEndpoint deliveries in flight across both; freed slots are refilled at once.
      const deadline = Date.now() + 10_000;
      while (receiver.received.length < 30 && Date.now() < deadline) {
        await Promise.all([one.tick(), two.tick()]);
        await Bun.sleep(5);
      }
      await Promise.all([one.drain(), two.drain()]);
      const ids = receiver.received.map((request) => request.id);
      expect(ids).toHaveLength(30);
      expect(new Set(ids).size).toBe(30);
      const states = await queryRows<{ state: string; attempts: number }>(stores.one, "SELECT state, attempts FROM webhook_deliveries");
      expect(states.every((row) => row.state === "delivered" && row.attempts === 1)).toBe(true);
    } finally {
      await stores.close();
    }
  });
});
