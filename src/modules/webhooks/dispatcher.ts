import { DAY_MS, type Store } from "../../db/store";
import { type ClaimedDelivery, type DeliveryLimits, MAX_PENDING_PER_ENDPOINT } from "../../db/webhooks/records";
import type { Clock } from "../../lib/clock";
import { newRandomToken } from "../../lib/ids";
import type { Logger } from "../../lib/logger";
import { type OutboundClient, OutboundRefusal } from "../../lib/outbound";
import { signWebhook } from "./signature";

/**
 * Pauses after each failed attempt (the Standard Webhooks reference schedule): retries over about
 * 27 hours, after which the delivery is failed. An endpoint failing for DISABLE_AFTER_MS is disabled.
 */
export const RETRY_SCHEDULE_MS = [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000] as const;
export const DISABLE_AFTER_MS = DAY_MS;
/** A receiver must answer within this; the lease outlasts it by far, so a delivery in progress is never claimed twice. */
export const DELIVERY_TIMEOUT_MS = 10_000;
const LEASE_MS = 60_000;
/**
 * Deliveries in flight at once: per instance (the pool), and per endpoint and per organization
 * across instances (counted by the store's leases). A slow or dead endpoint holds at most
 * `perEndpoint` slots, an organization at most `perOrganization`: never the whole pool.
 */
export const DELIVERY_POOL_SIZE = 20;
export const DELIVERY_LIMITS: DeliveryLimits = { perEndpoint: 2, perOrganization: 5 };
/** How often a tick also fails the deliveries past an endpoint's backlog bound (MAX_PENDING_PER_ENDPOINT). */
export const BACKLOG_SWEEP_MS = 60_000;
/** At most this much of a response body is kept, as text, in the delivery log. */
export const RESPONSE_EXCERPT_BYTES = 256;

/** What an attempt came to: `status` null when no response came (refused address, network error, time-out). */
interface AttemptResult {
  delivered: boolean;
  status: number | null;
  response: string | null;
}

/**
 * Sends the outbox's deliveries, at least once each: claims due ones (a lease per delivery, so of
 * several instances one sends each), posts them signed, and records each attempt with its next try.
 * Deliveries run in a pool: each free slot is filled as soon as it frees, with due deliveries
 * chosen fairly by the store (round-robin over endpoints, oldest first within one, under the
 * per-endpoint and per-organization limits), so no endpoint waits for another's slow receiver.
 * A crash after sending and before recording sends again once the lease ends: receivers
 * de-duplicate on `webhook-id`, which stays the event's id across attempts.
 */
export class WebhookDispatcher {
  private readonly owner = `dsp_${newRandomToken(10)}`;
  private readonly inFlight = new Set<Promise<void>>();
  /** Claims run one after the other, so two never count the same free slots. */
  private claims: Promise<unknown> = Promise.resolve();
  private draining = false;
  private sweptAt = Number.NEGATIVE_INFINITY;
  private readonly timeoutMs: number;

  constructor(
    private readonly deps: {
      store: Store;
      clock: Clock;
      logger: Logger;
      /** Deliveries go out through it, redirects not followed: a 3xx is a failed attempt. */
      outbound: OutboundClient;
      userAgent: string;
      timeoutMs?: number;
    },
  ) {
    this.timeoutMs = deps.timeoutMs ?? DELIVERY_TIMEOUT_MS;
  }

  /** Fills the pool's free slots with due deliveries; resolves with their number once they are all recorded. */
  async tick(): Promise<number> {
    await this.sweepBacklog();
    const started = await this.fill();
    // Every send is waited for, also when recording one fails: a tick ends only when its sends are recorded.
    const failed = (await Promise.allSettled(started)).find((outcome) => outcome.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    return started.length;
  }

  /** Stops filling freed slots and waits for the deliveries in flight (shutdown). */
  async drain(): Promise<void> {
    this.draining = true;
    await this.claims;
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  /** At most once per BACKLOG_SWEEP_MS: an endpoint past MAX_PENDING_PER_ENDPOINT pending deliveries loses its oldest. */
  private async sweepBacklog(): Promise<void> {
    const now = this.deps.clock.now();
    if (now - this.sweptAt < BACKLOG_SWEEP_MS) return;
    this.sweptAt = now;
    const dropped = await this.deps.store.dropWebhookBacklogOverflow();
    if (dropped > 0) this.deps.logger.warn("webhook backlog dropped", { dropped, maxPendingPerEndpoint: MAX_PENDING_PER_ENDPOINT });
  }

  private fill(): Promise<Array<Promise<void>>> {
    const filling = this.claims.then(() => this.claimFreeSlots());
    this.claims = filling.catch(() => undefined);
    return filling;
  }

  private async claimFreeSlots(): Promise<Array<Promise<void>>> {
    const free = DELIVERY_POOL_SIZE - this.inFlight.size;
    if (free <= 0 || this.draining) return [];
    const claimed = await this.deps.store.claimWebhookDeliveries({
      owner: this.owner,
      now: this.deps.clock.now(),
      leaseMs: LEASE_MS,
      limit: free,
      ...DELIVERY_LIMITS,
    });
    return claimed.map((delivery) => this.track(this.send(delivery)));
  }

  /** Keeps a send in the pool until it is recorded; its slot is filled again at once. */
  private track(sending: Promise<void>): Promise<void> {
    this.inFlight.add(sending);
    const freed = () => {
      this.inFlight.delete(sending);
      this.fill().catch((error: unknown) => this.deps.logger.error("webhook claim failed", { error: String(error) }));
    };
    sending.then(freed, (error: unknown) => {
      this.deps.logger.error("webhook delivery not recorded", { error: String(error) });
      freed();
    });
    return sending;
  }

  private async send(delivery: ClaimedDelivery): Promise<void> {
    const result = await this.attempt(delivery);
    const now = this.deps.clock.now();
    const pause = RETRY_SCHEDULE_MS[delivery.attempts];
    const nextAttemptAt = result.delivered || pause === undefined ? null : now + pause;
    await this.deps.store.finishWebhookDelivery({
      endpointId: delivery.endpointId,
      eventId: delivery.eventId,
      owner: this.owner,
      now,
      ...result,
      nextAttemptAt,
      disableAfterMs: DISABLE_AFTER_MS,
    });
    if (!result.delivered) {
      this.deps.logger.warn("webhook delivery failed", {
        endpointId: delivery.endpointId,
        eventId: delivery.eventId,
        attempt: delivery.attempts + 1,
        status: result.status,
        nextAttemptAt: nextAttemptAt === null ? null : new Date(nextAttemptAt).toISOString(),
      });
    }
  }

  private async attempt(delivery: ClaimedDelivery): Promise<AttemptResult> {
    const body = JSON.stringify({ type: delivery.eventType, timestamp: new Date(delivery.eventCreatedAt).toISOString(), data: JSON.parse(delivery.payload) });
    // The wall clock, not the service clock: receivers compare it with theirs to refuse replays.
    const timestamp = Math.floor(Date.now() / 1000);
    try {
      const response = await this.deps.outbound.send(delivery.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": this.deps.userAgent,
          "webhook-id": delivery.eventId,
          "webhook-timestamp": String(timestamp),
          "webhook-signature": signWebhook({ id: delivery.eventId, timestamp, body, secrets: delivery.secrets }),
        },
        body,
        maxRedirects: 0,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      return { delivered: response.status >= 200 && response.status < 300, status: response.status, response: await excerpt(response) };
    } catch (error) {
      if (error instanceof OutboundRefusal) return { delivered: false, status: null, response: error.message };
      const timedOut = error instanceof Error && (error.name === "TimeoutError" || error.name === "AbortError");
      return { delivered: false, status: null, response: timedOut ? `no answer within ${this.timeoutMs} ms` : "connection failed" };
    }
  }
}

/** The first RESPONSE_EXCERPT_BYTES of a body as text; the rest is never read. */
async function excerpt(response: Response): Promise<string | null> {
  if (response.body === null) return null;
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < RESPONSE_EXCERPT_BYTES) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } catch {
    // A body cut off or too slow: what came is the excerpt.
  } finally {
    void reader.cancel().catch(() => {});
  }
  const bytes = new Uint8Array(Math.min(size, RESPONSE_EXCERPT_BYTES));
  let offset = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, bytes.byteLength - offset);
    bytes.set(part, offset);
    offset += part.byteLength;
    if (offset === bytes.byteLength) break;
  }
  return bytes.byteLength === 0 ? null : new TextDecoder().decode(bytes);
}
