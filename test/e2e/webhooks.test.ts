// Webhooks end to end over a real port, in development mode (which lets webhooks reach a loopback
// receiver): look-ups take the balance across the customer's threshold and the receiver gets a
// `credits.low` it verifies with the standardwebhooks package; another organization's hanging
// endpoint, its test events rate limited, does not hold that event back.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { startReceiver, type Receiver } from "../webhooks/receiver";
import { developmentSignIn, expectProblem, feedLine, postJSON, type Service, startService } from "./harness";

const FRESH_GTIN = "4006381333931";
const WEBHOOKS = "/api/v1/customer/webhooks";

let service: Service;
let receiver: Receiver;
/** Another organization's receiver that never answers: each delivery to it waits for the 10 s time-out. */
let hangingRequests = 0;
const hanging = Bun.serve({ port: 0, hostname: "127.0.0.1", idleTimeout: 0, fetch: () => (hangingRequests++, new Promise<Response>(() => {})) });

beforeAll(async () => {
  receiver = startReceiver();
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: "10" },
    prepare: async (cli) => void (await cli(["import", "-"], { stdin: feedLine(FRESH_GTIN, { merchantId: "m-1", price: "12.99", ageMs: 60_000 }) })),
  });
});

afterAll(async () => {
  hanging.stop(true);
  await service?.stop();
  await receiver?.stop();
});

async function body<T = any>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect({ status: response.status, text }).toEqual({ status, text: expect.any(String) });
  return JSON.parse(text) as T;
}

/** Waits for the service's delivery worker (it looks every second) to reach the receiver. */
async function received(count: number): Promise<void> {
  for (let waited = 0; receiver.received.length < count && waited < 20_000; waited += 100) await Bun.sleep(100);
  expect(receiver.received.length).toBe(count);
}

/** Queues test events for a hanging endpoint of another organization until the rate limit refuses one (429 with Retry-After). */
async function stallAnotherOrganization(): Promise<number> {
  const { cookie } = await developmentSignIn(service, "mallory@example.com");
  const headers = { cookie, origin: service.publicURL };
  const { endpoint } = await body(
    await postJSON(service, WEBHOOKS, { url: `http://127.0.0.1:${hanging.port}/hooks`, eventTypes: ["credits.low"] }, headers),
    201,
  );
  for (let queued = 0; queued < 100; queued++) {
    const response = await postJSON(service, `${WEBHOOKS}/${endpoint.id}/test`, undefined, headers);
    if (response.status === 429) {
      const problem = await expectProblem(service, response, 429, "rate-limited");
      expect(problem.detail).toContain("test events per minute");
      expect(Number(response.headers.get("retry-after"))).toBeGreaterThan(0);
      return queued;
    }
    expect(response.status).toBe(202);
  }
  throw new Error("test events were never rate limited");
}

test("look-ups that cross the low-credit threshold send a signed credits.low to the customer's receiver, however stalled another organization's endpoint is", async () => {
  expect(await stallAnotherOrganization()).toBeGreaterThanOrEqual(10);
  for (let waited = 0; hangingRequests === 0 && waited < 5_000; waited += 50) await Bun.sleep(50);
  const { cookie, user } = await developmentSignIn(service, "ada@example.com");
  const headers = { cookie, origin: service.publicURL };
  const settings = await service.request(`${WEBHOOKS}/settings`, {
    method: "PATCH",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify({ lowCreditThreshold: 5 }),
  });
  expect(await body(settings, 200)).toEqual({ lowCreditThreshold: 5 });
  const { endpoint, secret } = await body(await postJSON(service, WEBHOOKS, { url: receiver.url, eventTypes: ["credits.low"] }, headers), 201);
  const { clearKey } = await body(await postJSON(service, "/api/v1/customer/api-keys", { name: "production" }, headers), 201);

  // 10 trial credits: the sixth billed look-up takes the balance from 5 to 4, below the threshold.
  for (let i = 0; i < 6; i++) {
    const response = await service.request(`/api/v1/products/${FRESH_GTIN}/price`, { headers: { authorization: `Bearer ${clearKey}` } });
    expect((await body(response, 200)).meta.creditsConsumed).toBe(1);
  }
  const balance = await service.request("/api/v1/customer/billing/balance", { headers: { authorization: `Bearer ${clearKey}` } });
  expect(await body(balance, 200)).toMatchObject({ available: 4, reserved: 0 });
  const lowAt = Date.now();
  await received(1);
  // The hanging endpoint's deliveries hold their 10 s time-outs meanwhile: credits.low does not wait for them (a tick is 1 s).
  expect(Date.now() - lowAt).toBeLessThan(3_000);
  expect(hangingRequests).toBeGreaterThan(0);
  const [request] = receiver.received;
  const event = new Webhook(secret).verify(request!.body, {
    "webhook-id": request!.id,
    "webhook-timestamp": request!.timestamp,
    "webhook-signature": request!.signature,
  }) as any;
  expect(event).toMatchObject({ type: "credits.low", data: { organizationId: user.organization.id, balance: 4, threshold: 5 } });
  expect(request!.headers["user-agent"]).toStartWith("price-service/");

  // The receiver answers before the service records the outcome: wait for the record, not the request.
  const deliveries = async () =>
    (await body<{ items: Array<{ state: string }> }>(await service.request(`${WEBHOOKS}/${endpoint.id}/deliveries`, { headers }), 200)).items;
  let log = { items: await deliveries() };
  for (let waited = 0; log.items[0]?.state === "pending" && waited < 5_000; waited += 50) {
    await Bun.sleep(50);
    log = { items: await deliveries() };
  }
  expect(log.items).toMatchObject([{ eventId: request!.id, eventType: "credits.low", state: "delivered", attempts: 1, lastStatus: 200 }]);
});
