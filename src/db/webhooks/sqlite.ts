import type { Database } from "bun:sqlite";
import { page } from "../rows";
import type { Page } from "../store";
import {
  BACKLOG_DROPPED,
  chooseFairly,
  type ClaimedDelivery,
  type ClaimRequest,
  type DueDelivery,
  type InFlightCount,
  MAX_PENDING_PER_ENDPOINT,
  type DeliveryAttempt,
  decodeDeliveryCursor,
  encodeDeliveryCursor,
  type NewWebhookEndpoint,
  type NewWebhookEvent,
  type WebhookDelivery,
  type WebhookEndpoint,
} from "./records";

const ENDPOINT_SELECT = `SELECT id, organization_id AS organizationId, url, event_types AS eventTypes, status, failing_since AS failingSince,
  disabled_at AS disabledAt, created_at AS createdAt FROM webhook_endpoints`;

type EndpointRow = Omit<WebhookEndpoint, "eventTypes"> & { eventTypes: string };

function toEndpoint(row: EndpointRow): WebhookEndpoint {
  return { ...row, eventTypes: JSON.parse(row.eventTypes) as string[] };
}

/**
 * The SQLite store's webhook tables. Every write runs on the store's one connection, so `emit`
 * called inside one of the store's transactions is part of it. The claim runs in a write transaction
 * (BEGIN IMMEDIATE): stores on one file take turns, so each delivery is claimed by one of them.
 */
export class SQLiteWebhooks {
  constructor(private readonly database: Database) {}

  private readonly statements = new Map<string, ReturnType<Database["prepare"]>>();
  private statement(text: string) {
    let prepared = this.statements.get(text);
    if (prepared === undefined) {
      prepared = this.database.prepare(text);
      this.statements.set(text, prepared);
    }
    return prepared;
  }

  /** Writes events to the outbox with a delivery for each enabled endpoint subscribed to their type; call inside a transaction. */
  emit(events: NewWebhookEvent[]): void {
    for (const event of events) {
      this.statement("INSERT INTO webhook_events (id, organization_id, type, payload, created_at) VALUES (?1, ?2, ?3, ?4, ?5)").run(
        event.id,
        event.organizationId,
        event.type,
        JSON.stringify(event.data),
        event.createdAt,
      );
      this.statement(
        `INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at)
         SELECT id, ?1, 'pending', 0, ?4, ?4 FROM webhook_endpoints
         WHERE organization_id = ?2 AND status = 'enabled' AND EXISTS (SELECT 1 FROM json_each(event_types) WHERE value = ?3)`,
      ).run(event.id, event.organizationId, event.type, event.createdAt);
    }
  }

  /** Fails the oldest pending deliveries of every endpoint holding more than MAX_PENDING_PER_ENDPOINT; returns how many. */
  dropBacklogOverflow(): number {
    const over = this.statement("SELECT 1 FROM webhook_deliveries WHERE state = 'pending' GROUP BY endpoint_id HAVING count(*) > ?1 LIMIT 1").get(
      MAX_PENDING_PER_ENDPOINT,
    );
    if (over === null) return 0;
    return this.statement(
      `UPDATE webhook_deliveries SET state = 'failed', next_attempt_at = NULL, last_response = ?1, lease_owner = NULL, lease_until = NULL
       WHERE rowid IN (
         SELECT id FROM (
           SELECT rowid AS id, row_number() OVER (PARTITION BY endpoint_id ORDER BY created_at DESC, event_id DESC) AS position
           FROM webhook_deliveries WHERE state = 'pending' AND endpoint_id IN (
             SELECT endpoint_id FROM webhook_deliveries WHERE state = 'pending' GROUP BY endpoint_id HAVING count(*) > ?2))
         WHERE position > ?2)`,
    ).run(BACKLOG_DROPPED, MAX_PENDING_PER_ENDPOINT).changes;
  }

  create(endpoint: NewWebhookEndpoint): WebhookEndpoint {
    this.statement(
      "INSERT INTO webhook_endpoints (id, organization_id, url, event_types, secret, status, created_at) VALUES (?1, ?2, ?3, ?4, ?5, 'enabled', ?6)",
    ).run(endpoint.id, endpoint.organizationId, endpoint.url, JSON.stringify(endpoint.eventTypes), endpoint.secret, endpoint.createdAt);
    return this.get(endpoint.organizationId, endpoint.id)!;
  }

  get(organizationId: string, id: string): WebhookEndpoint | null {
    const row = this.statement(`${ENDPOINT_SELECT} WHERE id = ?1 AND organization_id = ?2`).get(id, organizationId) as EndpointRow | null;
    return row === null ? null : toEndpoint(row);
  }

  list(organizationId: string, query: { limit: number; after?: string }): Page<WebhookEndpoint> {
    const rows = this.statement(`${ENDPOINT_SELECT} WHERE organization_id = ?1 AND (?2 IS NULL OR id < ?2) ORDER BY id DESC LIMIT ?3`).all(
      organizationId,
      query.after ?? null,
      query.limit + 1,
    ) as EndpointRow[];
    return page(rows.map(toEndpoint), query.limit);
  }

  delete(organizationId: string, id: string): boolean {
    return this.database
      .transaction(() => {
        if (this.get(organizationId, id) === null) return false;
        this.statement("DELETE FROM webhook_deliveries WHERE endpoint_id = ?1").run(id);
        this.statement("DELETE FROM webhook_endpoints WHERE id = ?1").run(id);
        return true;
      })
      .immediate();
  }

  rotateSecret(organizationId: string, id: string, input: { secret: string; previousSecretExpiresAt: number }): WebhookEndpoint | null {
    const changed = this.statement(
      "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = ?3, secret = ?4 WHERE id = ?1 AND organization_id = ?2",
    ).run(id, organizationId, input.previousSecretExpiresAt, input.secret);
    return changed.changes === 1 ? this.get(organizationId, id) : null;
  }

  enable(organizationId: string, id: string): WebhookEndpoint | null {
    const changed = this.statement(
      "UPDATE webhook_endpoints SET status = 'enabled', failing_since = NULL, disabled_at = NULL WHERE id = ?1 AND organization_id = ?2",
    ).run(id, organizationId);
    return changed.changes === 1 ? this.get(organizationId, id) : null;
  }

  sendTest(organizationId: string, endpointId: string, input: { eventId: string; now: number }): boolean {
    return this.database
      .transaction(() => {
        if (this.get(organizationId, endpointId) === null) return false;
        this.statement("INSERT INTO webhook_events (id, organization_id, type, payload, created_at) VALUES (?1, ?2, 'webhook.test', ?3, ?4)").run(
          input.eventId,
          organizationId,
          JSON.stringify({ organizationId, endpointId }),
          input.now,
        );
        this.statement(
          "INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at) VALUES (?1, ?2, 'pending', 0, ?3, ?3)",
        ).run(endpointId, input.eventId, input.now);
        return true;
      })
      .immediate();
  }

  listDeliveries(endpointId: string, query: { limit: number; after?: string }): Page<WebhookDelivery> {
    const after = query.after === undefined ? null : decodeDeliveryCursor(query.after);
    if (query.after !== undefined && after === null) throw new Error("listWebhookDeliveries: malformed cursor");
    const rows = this.statement(
      `SELECT d.event_id AS eventId, e.type AS eventType, d.state, d.attempts, d.last_status AS lastStatus, d.last_response AS lastResponse,
              d.last_attempt_at AS lastAttemptAt, d.next_attempt_at AS nextAttemptAt, d.created_at AS createdAt
       FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
       WHERE d.endpoint_id = ?1 AND (?2 IS NULL OR (d.created_at, d.event_id) < (?2, ?3))
       ORDER BY d.created_at DESC, d.event_id DESC LIMIT ?4`,
    ).all(endpointId, after?.createdAt ?? null, after?.eventId ?? null, query.limit + 1) as WebhookDelivery[];
    const items = rows.slice(0, query.limit);
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > query.limit && last ? encodeDeliveryCursor(last) : null };
  }

  lowCreditThreshold(organizationId: string): number | null {
    const row = this.statement("SELECT low_credit_threshold AS threshold FROM organizations WHERE id = ?1").get(organizationId) as {
      threshold: number | null;
    } | null;
    return row?.threshold ?? null;
  }

  setLowCreditThreshold(organizationId: string, threshold: number | null): void {
    this.statement("UPDATE organizations SET low_credit_threshold = ?2 WHERE id = ?1").run(organizationId, threshold);
  }

  claim(input: ClaimRequest): ClaimedDelivery[] {
    // A read first: an idle tick writes nothing (a write would also drop the store's read caches).
    const due = this.statement(
      `SELECT 1 FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       WHERE d.state = 'pending' AND d.next_attempt_at <= ?1 AND (d.lease_until IS NULL OR d.lease_until <= ?1) AND w.status = 'enabled' LIMIT 1`,
    ).get(input.now);
    if (due === null) return [];
    return this.database
      .transaction(() => {
        // Per enabled endpoint its perEndpoint oldest due deliveries, the endpoints in the order of their oldest.
        const candidates = this.statement(
          `SELECT x.endpoint_id AS endpointId, x.event_id AS eventId, w.organization_id AS organizationId
         FROM webhook_endpoints w JOIN webhook_deliveries x ON x.rowid IN (
           SELECT d.rowid FROM webhook_deliveries d
           WHERE d.endpoint_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= ?1 AND (d.lease_until IS NULL OR d.lease_until <= ?1)
           ORDER BY d.next_attempt_at, d.event_id LIMIT ?2)
         WHERE w.status = 'enabled'
         ORDER BY x.next_attempt_at, x.event_id`,
        ).all(input.now, input.perEndpoint) as DueDelivery[];
        const inFlight = this.statement(
          `SELECT d.endpoint_id AS endpointId, w.organization_id AS organizationId, count(*) AS count
         FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
         WHERE d.state = 'pending' AND d.lease_until > ?1 GROUP BY d.endpoint_id, w.organization_id`,
        ).all(input.now) as InFlightCount[];
        const lease = this.statement("UPDATE webhook_deliveries SET lease_owner = ?3, lease_until = ?4 WHERE endpoint_id = ?1 AND event_id = ?2");
        const read = this.statement(
          `SELECT d.endpoint_id AS endpointId, d.event_id AS eventId, e.type AS eventType, e.payload, e.created_at AS eventCreatedAt, w.url,
                w.secret, w.previous_secret AS previousSecret, w.previous_secret_expires_at AS previousSecretExpiresAt, d.attempts
         FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id JOIN webhook_events e ON e.id = d.event_id
         WHERE d.endpoint_id = ?1 AND d.event_id = ?2`,
        );
        return chooseFairly(candidates, inFlight, input).map(({ endpointId, eventId }) => {
          lease.run(endpointId, eventId, input.owner, input.now + input.leaseMs);
          const { secret, previousSecret, previousSecretExpiresAt, ...row } = read.get(endpointId, eventId) as Omit<ClaimedDelivery, "secrets"> & {
            secret: string;
            previousSecret: string | null;
            previousSecretExpiresAt: number | null;
          };
          const secrets =
            previousSecret !== null && previousSecretExpiresAt !== null && previousSecretExpiresAt > input.now ? [secret, previousSecret] : [secret];
          return { ...row, secrets };
        });
      })
      .immediate();
  }

  finish(attempt: DeliveryAttempt): boolean {
    return this.database
      .transaction(() => {
        const state = attempt.delivered ? "delivered" : attempt.nextAttemptAt === null ? "failed" : "pending";
        const changed = this.statement(
          `UPDATE webhook_deliveries SET state = ?4, attempts = attempts + 1, last_status = ?5, last_response = ?6, last_attempt_at = ?7,
           next_attempt_at = ?8, lease_owner = NULL, lease_until = NULL
         WHERE endpoint_id = ?1 AND event_id = ?2 AND lease_owner = ?3 AND state = 'pending'`,
        ).run(
          attempt.endpointId,
          attempt.eventId,
          attempt.owner,
          state,
          attempt.status,
          attempt.response,
          attempt.now,
          state === "pending" ? attempt.nextAttemptAt : null,
        );
        if (changed.changes !== 1) return false;
        if (attempt.delivered) {
          this.statement("UPDATE webhook_endpoints SET failing_since = NULL WHERE id = ?1").run(attempt.endpointId);
        } else {
          this.statement(
            `UPDATE webhook_endpoints SET failing_since = coalesce(failing_since, ?2),
             status = CASE WHEN ?2 - coalesce(failing_since, ?2) >= ?3 THEN 'disabled' ELSE status END,
             disabled_at = CASE WHEN ?2 - coalesce(failing_since, ?2) >= ?3 AND status = 'enabled' THEN ?2 ELSE disabled_at END
           WHERE id = ?1`,
          ).run(attempt.endpointId, attempt.now, attempt.disableAfterMs);
        }
        return true;
      })
      .immediate();
  }
}
