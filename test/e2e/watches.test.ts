// Price watches end to end over a real port, in development mode (which lets webhooks reach a
// loopback receiver): a customer watches a product with an API key, the operator imports a lower
// price with the CLI beside `serve`, and the receiver gets a signed `price.changed`, billed once.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { startReceiver, type Receiver } from "../webhooks/receiver";
import { developmentSignIn, feedLine, postJSON, type Service, startService } from "./harness";

const GTIN = "4006381333931";

let service: Service;
let receiver: Receiver;

beforeAll(async () => {
  receiver = startReceiver();
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: "10" },
    prepare: async (cli) => void (await cli(["import", "-"], { stdin: feedLine(GTIN, { merchantId: "m-1", price: "12.99", ageMs: 60_000 }) })),
  });
});

afterAll(async () => {
  await service?.stop();
  await receiver?.stop();
});

async function body<T = any>(response: Response, status: number): Promise<T> {
  const text = await response.text();
  expect({ status: response.status, text }).toEqual({ status, text: expect.any(String) });
  return JSON.parse(text) as T;
}

test("an import that lowers a watched price sends a signed price.changed, billed with one usage row", async () => {
  const { cookie, user } = await developmentSignIn(service, "watcher@example.com");
  const headers = { cookie, origin: service.publicURL };
  const { secret } = await body(await postJSON(service, "/api/v1/customer/webhooks", { url: receiver.url, eventTypes: ["price.changed"] }, headers), 201);
  const { clearKey } = await body(await postJSON(service, "/api/v1/customer/api-keys", { name: "watches" }, headers), 201);
  const auth = { authorization: `Bearer ${clearKey}` };
  const watch = await body(await postJSON(service, "/api/v1/customer/watches", { gtin: GTIN, merchant: "m-1", trigger: "price-drop" }, auth), 201);
  expect(watch).toMatchObject({ gtin: `0${GTIN}`, merchant: "m-1", trigger: "price-drop", status: "active" });

  const imported = await service.cli(["import", "-"], { stdin: feedLine(GTIN, { merchantId: "m-1", price: "11.49", ageMs: 1_000 }) });
  expect(imported.code).toBe(0);
  for (let waited = 0; receiver.received.length < 1 && waited < 20_000; waited += 100) await Bun.sleep(100);
  expect(receiver.received.length).toBe(1);
  const [request] = receiver.received;
  const event = new Webhook(secret).verify(request!.body, {
    "webhook-id": request!.id,
    "webhook-timestamp": request!.timestamp,
    "webhook-signature": request!.signature,
  }) as any;
  expect(event).toMatchObject({
    type: "price.changed",
    data: {
      organizationId: user.organization.id,
      watchId: watch.id,
      gtin: `0${GTIN}`,
      merchant: "m-1",
      trigger: "price-drop",
      previous: { merchant: "m-1", price: { amount: 1299, currency: "EUR" }, availability: "in_stock" },
      current: { merchant: "m-1", price: { amount: 1149, currency: "EUR" }, availability: "in_stock" },
    },
  });

  const transactions = await body<{ items: Array<{ type: string; amount: number; requestId: string | null; description: string }> }>(
    await service.request("/api/v1/customer/billing/transactions", { headers: auth }),
    200,
  );
  expect(transactions.items.filter((row) => row.description.startsWith("Price watch event"))).toMatchObject([
    { type: "usage", amount: -1, requestId: request!.id },
  ]);
  const read = await body(await service.request(`/api/v1/customer/watches/${watch.id}`, { headers: auth }), 200);
  expect(read.lastTriggeredAt).not.toBeNull();
});
