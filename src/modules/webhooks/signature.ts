import { hmac } from "@oslojs/crypto/hmac";
import { SHA256 } from "@oslojs/crypto/sha2";
import { decodeBase64, encodeBase64 } from "@oslojs/encoding";

const encoder = new TextEncoder();
const SECRET_PREFIX = "whsec_";
const SECRET_BYTES = 32;

/** A new Standard Webhooks signing secret: `whsec_` + base64 of 32 random bytes. */
export function newWebhookSecret(): string {
  const bytes = new Uint8Array(SECRET_BYTES);
  crypto.getRandomValues(bytes);
  return SECRET_PREFIX + encodeBase64(bytes);
}

/**
 * The `webhook-signature` header of Standard Webhooks: for each secret, `v1,` + base64 of the
 * HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed by the secret's base64-decoded bytes; several
 * (during a secret rotation) separated by spaces, any of which a receiver may match.
 */
export function signWebhook(input: { id: string; timestamp: number; body: string; secrets: string[] }): string {
  const message = encoder.encode(`${input.id}.${input.timestamp}.${input.body}`);
  return input.secrets.map((secret) => `v1,${encodeBase64(hmac(SHA256, decodeBase64(secret.slice(SECRET_PREFIX.length)), message))}`).join(" ");
}
