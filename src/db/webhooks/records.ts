// Webhook endpoints, the event outbox and deliveries, as both stores keep them.

/** The event types an endpoint may subscribe to; `webhook.test` is sent only by "send a test event". */
export const WEBHOOK_EVENT_TYPES = [
  "credits.low",
  "credits.depleted",
  "credits.granted",
  "key.created",
  "key.rotated",
  "key.revoked",
  "invoice.created",
  "price.changed",
] as const;
export type SubscribableEventType = (typeof WEBHOOK_EVENT_TYPES)[number];
export type WebhookEventType = SubscribableEventType | "webhook.test";

export interface WebhookEndpoint {
  id: string;
  organizationId: string;
  url: string;
  eventTypes: string[];
  status: "enabled" | "disabled";
  failingSince: number | null;
  disabledAt: number | null;
  createdAt: number;
}

export interface NewWebhookEndpoint {
  id: string;
  organizationId: string;
  url: string;
  eventTypes: string[];
  secret: string;
  createdAt: number;
}

/** An event for the outbox; `data` is what receivers get under `data`. */
export interface NewWebhookEvent {
  id: string;
  organizationId: string;
  type: WebhookEventType;
  data: Record<string, unknown>;
  createdAt: number;
}

export type DeliveryState = "pending" | "delivered" | "failed";

/** One line of an endpoint's delivery log. */
export interface WebhookDelivery {
  eventId: string;
  eventType: string;
  state: DeliveryState;
  attempts: number;
  lastStatus: number | null;
  lastResponse: string | null;
  lastAttemptAt: number | null;
  nextAttemptAt: number | null;
  createdAt: number;
}

/** A delivery claimed by one instance's worker, with what it needs to send it. */
export interface ClaimedDelivery {
  endpointId: string;
  eventId: string;
  eventType: string;
  /** JSON of the event's data. */
  payload: string;
  eventCreatedAt: number;
  url: string;
  /** Every secret that signs: the current one, and the previous one while it is still valid after a rotation. */
  secrets: string[];
  /** Attempts made before this one. */
  attempts: number;
}

/**
 * An endpoint keeps at most this many pending deliveries: the delivery worker's backlog sweep fails
 * the oldest past it (any event type), with BACKLOG_DROPPED as their last response.
 */
export const MAX_PENDING_PER_ENDPOINT = 10_000;
export const BACKLOG_DROPPED = `dropped: more than ${MAX_PENDING_PER_ENDPOINT} deliveries were pending for this endpoint`;

/** How many deliveries may be in flight at once, by leases in the store (so across instances). */
export interface DeliveryLimits {
  perEndpoint: number;
  perOrganization: number;
}

export interface ClaimRequest extends DeliveryLimits {
  owner: string;
  now: number;
  leaseMs: number;
  /** Free slots of the claiming worker: at most this many are claimed. */
  limit: number;
}

/** A due delivery a claim may take; the candidates of one endpoint come oldest first. */
export interface DueDelivery {
  endpointId: string;
  eventId: string;
  organizationId: string;
}

/** Deliveries in flight (leased) now, per endpoint with its organization. */
export interface InFlightCount {
  endpointId: string;
  organizationId: string;
  count: number;
}

/**
 * The deliveries a claim takes, fairly: round-robin over endpoints (in the order of `due`, whose
 * first delivery per endpoint is its oldest), oldest first within one endpoint, never past an
 * endpoint's or an organization's limit counting what is in flight, and at most `request.limit`.
 */
export function chooseFairly(due: DueDelivery[], inFlight: InFlightCount[], request: ClaimRequest): DueDelivery[] {
  const busyEndpoints = new Map<string, number>();
  const busyOrganizations = new Map<string, number>();
  const add = (map: Map<string, number>, key: string, count: number) => map.set(key, (map.get(key) ?? 0) + count);
  for (const row of inFlight) {
    add(busyEndpoints, row.endpointId, row.count);
    add(busyOrganizations, row.organizationId, row.count);
  }
  const queues = new Map<string, DueDelivery[]>();
  for (const delivery of due) queues.set(delivery.endpointId, [...(queues.get(delivery.endpointId) ?? []), delivery]);
  const chosen: DueDelivery[] = [];
  for (let progress = true; progress && chosen.length < request.limit; ) {
    progress = false;
    for (const queue of queues.values()) {
      const next = queue[0];
      if (next === undefined || chosen.length >= request.limit) continue;
      if ((busyEndpoints.get(next.endpointId) ?? 0) >= request.perEndpoint || (busyOrganizations.get(next.organizationId) ?? 0) >= request.perOrganization)
        continue;
      chosen.push(queue.shift()!);
      add(busyEndpoints, next.endpointId, 1);
      add(busyOrganizations, next.organizationId, 1);
      progress = true;
    }
  }
  return chosen;
}

/** What one attempt of a claimed delivery came to. */
export interface DeliveryAttempt {
  endpointId: string;
  eventId: string;
  owner: string;
  now: number;
  delivered: boolean;
  status: number | null;
  response: string | null;
  /** When to try again after a failure; null: give up (the delivery is failed). */
  nextAttemptAt: number | null;
  /** A failing endpoint is disabled once it has failed for this long without a success. */
  disableAfterMs: number;
}

/**
 * The balance events a ledger movement from `before` to `after` causes: `credits.low` when it
 * crosses the organization's threshold downwards, `credits.depleted` when it reaches zero.
 */
export function balanceEventTypes(before: number, after: number, threshold: number | null): Array<"credits.low" | "credits.depleted"> {
  const types: Array<"credits.low" | "credits.depleted"> = [];
  if (threshold !== null && before >= threshold && after < threshold) types.push("credits.low");
  if (before > 0 && after <= 0) types.push("credits.depleted");
  return types;
}

/** The data of a balance event (the PostgreSQL debit builds the same object in SQL). */
export function balanceEventData(
  type: "credits.low" | "credits.depleted",
  organizationId: string,
  balance: number,
  threshold: number | null,
): Record<string, unknown> {
  return type === "credits.low" ? { organizationId, balance, threshold } : { organizationId, balance };
}

/** The data of a `key.*` event: which key, never its secret. */
export function keyEventData(
  key: { id: string; organizationId: string; name: string; keyPrefix: string },
  extra: { replacedBy?: string } = {},
): Record<string, unknown> {
  return { organizationId: key.organizationId, keyId: key.id, name: key.name, keyPrefix: key.keyPrefix, ...extra };
}

export function grantEventData(
  bucket: { id: string; organizationId: string; source: string; granted: number; expiresAt: number | null },
  transactionType: string,
  balance: number,
): Record<string, unknown> {
  return {
    organizationId: bucket.organizationId,
    bucketId: bucket.id,
    source: bucket.source,
    transactionType,
    amount: bucket.granted,
    expiresAt: bucket.expiresAt === null ? null : new Date(bucket.expiresAt).toISOString(),
    balance,
  };
}

export function invoiceEventData(invoice: {
  id: string;
  organizationId: string;
  number: string;
  status: string;
  amount: number;
  currency: string;
}): Record<string, unknown> {
  return {
    organizationId: invoice.organizationId,
    invoiceId: invoice.id,
    number: invoice.number,
    status: invoice.status,
    total: { amount: invoice.amount, currency: invoice.currency },
  };
}

/** The delivery log's cursor: the (createdAt, eventId) of the last line of a page, opaque to clients. */
export function encodeDeliveryCursor(position: { createdAt: number; eventId: string }): string {
  return Buffer.from(`${position.createdAt}.${position.eventId}`).toString("base64url");
}

/** The position a cursor names, or null when it is not one this service made. */
export function decodeDeliveryCursor(cursor: string): { createdAt: number; eventId: string } | null {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) return null;
  const match = /^(\d{1,16})\.(msg_[a-z0-9]{1,64})$/.exec(Buffer.from(cursor, "base64url").toString("utf8"));
  if (match === null || !Number.isSafeInteger(Number(match[1]))) return null;
  return { createdAt: Number(match[1]), eventId: match[2]! };
}
