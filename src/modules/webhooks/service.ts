import type { Store } from "../../db/store";
import type { SubscribableEventType, WebhookDelivery, WebhookEndpoint } from "../../db/webhooks/records";
import { toISO } from "../../lib/clock";
import { newId } from "../../lib/ids";
import { Problem } from "../../http/problem";
import { MemoryRateLimiter, type RateLimitPolicy, rateLimitHeaders } from "../../http/rate-limit";
import { type AddressPolicy, literalAddress } from "../../lib/outbound";
import { newWebhookSecret } from "./signature";

/** After a rotation the previous secret still signs this long, so receivers can switch over. */
export const PREVIOUS_SECRET_VALIDITY_MS = 24 * 3_600_000;

const ENDPOINT_NOT_FOUND = {
  en: "No webhook endpoint of your organization has this id.",
  fr: "Aucun point de terminaison webhook de votre organisation n'a cet identifiant.",
};

function invalidURL(en: string, fr: string): Problem {
  return new Problem("unprocessable-body", { detail: { en, fr } });
}

/**
 * A receiver URL as stored, or 422: https (plain http only to a literal address of an allowed
 * network, or in development mode), no credentials, and no refused literal address. Names are
 * resolved and checked at each delivery, since what they resolve to can change.
 */
export function checkWebhookURL(raw: string, rules: { policy: AddressPolicy; development: boolean }): string {
  let url: URL;
  try {
    url = new URL(raw.trim());
  } catch {
    throw invalidURL("url must be an absolute https URL.", "url doit être une URL https absolue.");
  }
  if (url.username !== "" || url.password !== "")
    throw invalidURL("url may not carry a user name or password.", "url ne peut pas contenir d'identifiant ni de mot de passe.");
  const address = literalAddress(url.hostname);
  if (address !== null && !rules.policy.isAllowed(address)) {
    throw invalidURL(
      "url points at a loopback, link-local or private address, which webhooks never reach (an operator can allow networks with OUTBOUND_ALLOWED_NETWORKS).",
      "url désigne une adresse de bouclage, locale ou privée, que les webhooks n'atteignent jamais (un opérateur peut autoriser des réseaux avec OUTBOUND_ALLOWED_NETWORKS).",
    );
  }
  // On-premises receivers often have no public certificate: plain http goes only to the networks the operator listed.
  const plainAllowed = rules.development || (address !== null && rules.policy.isListed(address));
  if (url.protocol !== "https:" && !(url.protocol === "http:" && plainAllowed)) throw invalidURL("url must use https.", "url doit utiliser https.");
  url.hash = "";
  return url.toString();
}

export async function endpointOfOrganization(store: Store, organizationId: string, id: string): Promise<WebhookEndpoint> {
  const endpoint = await store.getWebhookEndpoint(organizationId, id);
  if (endpoint === null) throw new Problem("not-found", { detail: ENDPOINT_NOT_FOUND });
  return endpoint;
}

export async function createWebhookEndpoint(
  store: Store,
  input: { organizationId: string; url: string; eventTypes: string[]; now: number },
): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
  const secret = newWebhookSecret();
  const endpoint = await store.createWebhookEndpoint({
    id: newId("whe", input.now),
    organizationId: input.organizationId,
    url: input.url,
    eventTypes: input.eventTypes,
    secret,
    createdAt: input.now,
  });
  return { endpoint, secret };
}

export async function rotateWebhookSecret(
  store: Store,
  input: { organizationId: string; id: string; now: number },
): Promise<{ endpoint: WebhookEndpoint; secret: string }> {
  const secret = newWebhookSecret();
  const endpoint = await store.rotateWebhookSecret(input.organizationId, input.id, {
    secret,
    previousSecretExpiresAt: input.now + PREVIOUS_SECRET_VALIDITY_MS,
  });
  if (endpoint === null) throw new Problem("not-found", { detail: ENDPOINT_NOT_FOUND });
  return { endpoint, secret };
}

export async function deleteWebhookEndpoint(store: Store, input: { organizationId: string; id: string }): Promise<void> {
  if (!(await store.deleteWebhookEndpoint(input.organizationId, input.id))) throw new Problem("not-found", { detail: ENDPOINT_NOT_FOUND });
}

export async function enableWebhookEndpoint(store: Store, input: { organizationId: string; id: string }): Promise<WebhookEndpoint> {
  const endpoint = await store.enableWebhookEndpoint(input.organizationId, input.id);
  if (endpoint === null) throw new Problem("not-found", { detail: ENDPOINT_NOT_FOUND });
  return endpoint;
}

/** Test events an organization may queue: this many per minute, in bursts of up to twice that. */
export const TEST_EVENT_POLICY: RateLimitPolicy = { name: "webhook-test", limit: 10, windowSeconds: 60 };

export function createTestEventLimiter(): MemoryRateLimiter {
  return new MemoryRateLimiter(TEST_EVENT_POLICY.limit, TEST_EVENT_POLICY.windowSeconds * 1000);
}

/**
 * Queues a `webhook.test` event for one endpoint; 429 past the organization's TEST_EVENT_POLICY,
 * 409 when the endpoint is disabled (nothing would be sent).
 */
export async function sendTestEvent(store: Store, limiter: MemoryRateLimiter, input: { organizationId: string; id: string; now: number }): Promise<string> {
  const endpoint = await endpointOfOrganization(store, input.organizationId, input.id);
  const decision = limiter.take(input.organizationId, input.now, TEST_EVENT_POLICY);
  if (!decision.allowed) {
    const limit = `${TEST_EVENT_POLICY.limit} test events per minute`;
    throw new Problem("rate-limited", {
      detail: {
        en: `Your organization may send ${limit}; retry later.`,
        fr: `Votre organisation peut envoyer ${TEST_EVENT_POLICY.limit} événements de test par minute ; réessayez plus tard.`,
      },
      headers: rateLimitHeaders([{ ...decision, policy: TEST_EVENT_POLICY }]),
    });
  }
  if (endpoint.status === "disabled") {
    throw new Problem("conflict", {
      detail: { en: "The endpoint is disabled: nothing is sent to it.", fr: "Le point de terminaison est désactivé : rien ne lui est envoyé." },
    });
  }
  const eventId = newId("msg", input.now);
  if (!(await store.sendTestWebhookEvent(input.organizationId, input.id, { eventId, now: input.now })))
    throw new Problem("not-found", { detail: ENDPOINT_NOT_FOUND });
  return eventId;
}

export function endpointJSON(endpoint: WebhookEndpoint) {
  return {
    id: endpoint.id,
    url: endpoint.url,
    // Stored from a body the schema checked, so each is one of the subscribable types.
    eventTypes: endpoint.eventTypes as SubscribableEventType[],
    status: endpoint.status,
    failingSince: toISO(endpoint.failingSince),
    disabledAt: toISO(endpoint.disabledAt),
    createdAt: toISO(endpoint.createdAt),
  };
}

export function deliveryJSON(delivery: WebhookDelivery) {
  return {
    eventId: delivery.eventId,
    eventType: delivery.eventType,
    state: delivery.state,
    attempts: delivery.attempts,
    lastStatus: delivery.lastStatus,
    lastResponse: delivery.lastResponse,
    lastAttemptAt: toISO(delivery.lastAttemptAt),
    nextAttemptAt: toISO(delivery.nextAttemptAt),
    createdAt: toISO(delivery.createdAt),
  };
}
