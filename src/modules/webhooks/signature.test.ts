import { describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import { newWebhookSecret, signWebhook } from "./signature";

describe("signWebhook", () => {
  test("a signature made with a new secret verifies with the standardwebhooks package", () => {
    const secret = newWebhookSecret();
    const body = JSON.stringify({ type: "credits.low", timestamp: "2026-11-22T10:00:00.000Z", data: { balance: 9 } });
    const timestamp = Math.floor(Date.now() / 1000);
    const headers = {
      "webhook-id": "msg_1",
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signWebhook({ id: "msg_1", timestamp, body, secrets: [secret] }),
    };
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
  });

  test("during a rotation either secret verifies, and a changed body verifies with none", () => {
    const [current, previous] = [newWebhookSecret(), newWebhookSecret()];
    const body = '{"type":"key.created"}';
    const timestamp = Math.floor(Date.now() / 1000);
    const headers = {
      "webhook-id": "msg_2",
      "webhook-timestamp": String(timestamp),
      "webhook-signature": signWebhook({ id: "msg_2", timestamp, body, secrets: [current, previous] }),
    };
    expect(new Webhook(current).verify(body, headers)).toEqual({ type: "key.created" });
    expect(new Webhook(previous).verify(body, headers)).toEqual({ type: "key.created" });
    expect(() => new Webhook(current).verify('{"type":"key.revoked"}', headers)).toThrow();
    expect(() => new Webhook(newWebhookSecret()).verify(body, headers)).toThrow();
  });
});
