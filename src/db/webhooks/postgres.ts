import { sql, type SQL } from "drizzle-orm";
import type postgres from "postgres";
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

/** What runs a drizzle statement: the database or a transaction. */
interface Executor {
  execute(query: SQL): Promise<unknown>;
}

/** The database's time in epoch milliseconds: leases are judged by it, so instances with skewed clocks agree. */
const DATABASE_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

const ENDPOINT_COLUMNS = `id, organization_id AS "organizationId", url, event_types AS "eventTypes", status, failing_since AS "failingSince",
  disabled_at AS "disabledAt", created_at AS "createdAt"`;

type EndpointRow = Omit<WebhookEndpoint, "failingSince" | "disabledAt" | "createdAt"> & {
  failingSince: string | null;
  disabledAt: string | null;
  createdAt: string;
};

function toEndpoint(row: EndpointRow): WebhookEndpoint {
  const ms = (value: string | null) => (value === null ? null : Number(value));
  return { ...row, failingSince: ms(row.failingSince), disabledAt: ms(row.disabledAt), createdAt: Number(row.createdAt) };
}

/**
 * Writes events to the outbox with a delivery for each enabled endpoint of the organization
 * subscribed to their type, inside the caller's transaction `tx`.
 */
export async function emitPostgres(tx: Executor, events: NewWebhookEvent[]): Promise<void> {
  if (events.length === 0) return;
  const rows = events.map((event) => ({
    id: event.id,
    organization_id: event.organizationId,
    type: event.type,
    payload: JSON.stringify(event.data),
    created_at: event.createdAt,
  }));
  await tx.execute(sql`
    WITH input AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) AS input(id text, organization_id text, type text, payload text, created_at bigint)
    ),
    events AS (INSERT INTO webhook_events (id, organization_id, type, payload, created_at) SELECT id, organization_id, type, payload, created_at FROM input)
    INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at)
    SELECT e.id, input.id, 'pending', 0, input.created_at, input.created_at
    FROM input JOIN webhook_endpoints e ON e.organization_id = input.organization_id AND e.status = 'enabled' AND e.event_types @> jsonb_build_array(input.type)`);
}

/** Claims take turns under this transaction-scoped advisory lock, so the leases one counts include every other claim's. */
const CLAIM_LOCK = "pg_advisory_xact_lock(hashtext('price-service webhook claim'))";

/** The webhook tables of the PostgreSQL store, on its connection pool. */
export class PostgresWebhooks {
  constructor(private readonly client: postgres.Sql) {}

  async create(endpoint: NewWebhookEndpoint): Promise<WebhookEndpoint> {
    await this.client`
      INSERT INTO webhook_endpoints (id, organization_id, url, event_types, secret, status, created_at)
      VALUES (${endpoint.id}, ${endpoint.organizationId}, ${endpoint.url}, ${JSON.stringify(endpoint.eventTypes)}::text::jsonb, ${endpoint.secret}, 'enabled', ${endpoint.createdAt})`;
    return (await this.get(endpoint.organizationId, endpoint.id))!;
  }

  async get(organizationId: string, id: string): Promise<WebhookEndpoint | null> {
    const [row] = await this.client.unsafe<EndpointRow[]>(`SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE id = $1 AND organization_id = $2`, [
      id,
      organizationId,
    ]);
    return row === undefined ? null : toEndpoint(row);
  }

  async list(organizationId: string, query: { limit: number; after?: string }): Promise<Page<WebhookEndpoint>> {
    const rows = await this.client.unsafe<EndpointRow[]>(
      `SELECT ${ENDPOINT_COLUMNS} FROM webhook_endpoints WHERE organization_id = $1 AND ($2::text IS NULL OR id < $2) ORDER BY id DESC LIMIT $3`,
      [organizationId, query.after ?? null, query.limit + 1],
    );
    return page(rows.map(toEndpoint), query.limit);
  }

  async delete(organizationId: string, id: string): Promise<boolean> {
    // Deliveries go with the endpoint (ON DELETE CASCADE).
    const deleted = await this.client`DELETE FROM webhook_endpoints WHERE id = ${id} AND organization_id = ${organizationId} RETURNING id`;
    return deleted.length === 1;
  }

  async rotateSecret(organizationId: string, id: string, input: { secret: string; previousSecretExpiresAt: number }): Promise<WebhookEndpoint | null> {
    const changed = await this.client`
      UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_expires_at = ${input.previousSecretExpiresAt}, secret = ${input.secret}
      WHERE id = ${id} AND organization_id = ${organizationId} RETURNING id`;
    return changed.length === 1 ? this.get(organizationId, id) : null;
  }

  async enable(organizationId: string, id: string): Promise<WebhookEndpoint | null> {
    const changed = await this.client`
      UPDATE webhook_endpoints SET status = 'enabled', failing_since = NULL, disabled_at = NULL WHERE id = ${id} AND organization_id = ${organizationId} RETURNING id`;
    return changed.length === 1 ? this.get(organizationId, id) : null;
  }

  async sendTest(organizationId: string, endpointId: string, input: { eventId: string; now: number }): Promise<boolean> {
    const [row] = await this.client<Array<{ sent: number }>>`
      WITH endpoint AS (SELECT id FROM webhook_endpoints WHERE id = ${endpointId} AND organization_id = ${organizationId}),
      event AS (
        INSERT INTO webhook_events (id, organization_id, type, payload, created_at)
        SELECT ${input.eventId}, ${organizationId}, 'webhook.test', ${JSON.stringify({ organizationId, endpointId })}, ${input.now} FROM endpoint
        RETURNING id
      ),
      delivery AS (
        INSERT INTO webhook_deliveries (endpoint_id, event_id, state, attempts, next_attempt_at, created_at)
        SELECT endpoint.id, event.id, 'pending', 0, ${input.now}, ${input.now} FROM endpoint, event
      )
      SELECT count(*)::int AS sent FROM event`;
    return row!.sent === 1;
  }

  async listDeliveries(endpointId: string, query: { limit: number; after?: string }): Promise<Page<WebhookDelivery>> {
    const after = query.after === undefined ? null : decodeDeliveryCursor(query.after);
    if (query.after !== undefined && after === null) throw new Error("listWebhookDeliveries: malformed cursor");
    const rows = await this.client<Array<Record<string, string | number | null>>>`
      SELECT d.event_id, e.type, d.state, d.attempts, d.last_status, d.last_response, d.last_attempt_at, d.next_attempt_at, d.created_at
      FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
      WHERE d.endpoint_id = ${endpointId} ${after === null ? this.client`` : this.client`AND (d.created_at, d.event_id) < (${after.createdAt}::bigint, ${after.eventId}::text)`}
      ORDER BY d.created_at DESC, d.event_id DESC LIMIT ${query.limit + 1}`;
    const ms = (value: unknown) => (value == null ? null : Number(value));
    const items: WebhookDelivery[] = rows.slice(0, query.limit).map((row) => ({
      eventId: row.event_id as string,
      eventType: row.type as string,
      state: row.state as WebhookDelivery["state"],
      attempts: Number(row.attempts),
      lastStatus: ms(row.last_status),
      lastResponse: row.last_response as string | null,
      lastAttemptAt: ms(row.last_attempt_at),
      nextAttemptAt: ms(row.next_attempt_at),
      createdAt: Number(row.created_at),
    }));
    const last = items[items.length - 1];
    return { items, nextCursor: rows.length > query.limit && last ? encodeDeliveryCursor(last) : null };
  }

  async lowCreditThreshold(organizationId: string): Promise<number | null> {
    const [row] = await this.client<
      Array<{ threshold: string | null }>
    >`SELECT low_credit_threshold AS threshold FROM organizations WHERE id = ${organizationId}`;
    return row?.threshold == null ? null : Number(row.threshold);
  }

  async setLowCreditThreshold(organizationId: string, threshold: number | null): Promise<void> {
    await this.client`UPDATE organizations SET low_credit_threshold = ${threshold} WHERE id = ${organizationId}`;
  }

  /** Fails the oldest pending deliveries of every endpoint holding more than MAX_PENDING_PER_ENDPOINT; returns how many. */
  async dropBacklogOverflow(): Promise<number> {
    const dropped = await this.client`
      UPDATE webhook_deliveries SET state = 'failed', next_attempt_at = NULL, last_response = ${BACKLOG_DROPPED}, lease_owner = NULL, lease_until = NULL
      WHERE (endpoint_id, event_id) IN (
        SELECT endpoint_id, event_id FROM (
          SELECT endpoint_id, event_id, row_number() OVER (PARTITION BY endpoint_id ORDER BY created_at DESC, event_id DESC) AS position
          FROM webhook_deliveries WHERE state = 'pending' AND endpoint_id IN (
            SELECT endpoint_id FROM webhook_deliveries WHERE state = 'pending' GROUP BY endpoint_id HAVING count(*) > ${MAX_PENDING_PER_ENDPOINT})
        ) ranked
        WHERE position > ${MAX_PENDING_PER_ENDPOINT})`;
    return dropped.count;
  }

  async claim(input: ClaimRequest): Promise<ClaimedDelivery[]> {
    const [due] = await this.client.unsafe(
      `SELECT 1 FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
       WHERE d.state = 'pending' AND d.next_attempt_at <= $1 AND (d.lease_until IS NULL OR d.lease_until <= ${DATABASE_NOW}) AND w.status = 'enabled' LIMIT 1`,
      [input.now],
    );
    if (due === undefined) return [];
    return this.client.begin(async (tx) => {
      await tx.unsafe(`SELECT ${CLAIM_LOCK}`);
      // Per enabled endpoint its perEndpoint oldest due deliveries, the endpoints in the order of their oldest.
      const candidates = await tx.unsafe<DueDelivery[]>(
        `SELECT x.endpoint_id AS "endpointId", x.event_id AS "eventId", w.organization_id AS "organizationId"
         FROM webhook_endpoints w CROSS JOIN LATERAL (
           SELECT d.endpoint_id, d.event_id, d.next_attempt_at FROM webhook_deliveries d
           WHERE d.endpoint_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= $1 AND (d.lease_until IS NULL OR d.lease_until <= ${DATABASE_NOW})
           ORDER BY d.next_attempt_at, d.event_id LIMIT $2) x
         WHERE w.status = 'enabled'
         ORDER BY x.next_attempt_at, x.event_id`,
        [input.now, input.perEndpoint],
      );
      const inFlight = await tx.unsafe<InFlightCount[]>(
        `SELECT d.endpoint_id AS "endpointId", w.organization_id AS "organizationId", count(*)::int AS count
         FROM webhook_deliveries d JOIN webhook_endpoints w ON w.id = d.endpoint_id
         WHERE d.state = 'pending' AND d.lease_until > ${DATABASE_NOW} GROUP BY d.endpoint_id, w.organization_id`,
      );
      const chosen = chooseFairly(candidates, inFlight, input).map(({ endpointId, eventId }) => ({ endpoint_id: endpointId, event_id: eventId }));
      if (chosen.length === 0) return [];
      // Answered in the order chosen (round-robin); events of one moment tie on their created_at.
      const rows = await tx.unsafe<Array<Record<string, string | number | null>>>(
        `WITH chosen AS (
           SELECT * FROM ROWS FROM (jsonb_to_recordset($1::text::jsonb) AS (endpoint_id text, event_id text)) WITH ORDINALITY AS chosen(endpoint_id, event_id, position)
         ),
         claimed AS (
           UPDATE webhook_deliveries d SET lease_owner = $2, lease_until = ${DATABASE_NOW} + $3::bigint
           FROM chosen WHERE d.endpoint_id = chosen.endpoint_id AND d.event_id = chosen.event_id
             AND d.state = 'pending' AND (d.lease_until IS NULL OR d.lease_until <= ${DATABASE_NOW})
           RETURNING d.endpoint_id, d.event_id, d.attempts
         )
         SELECT claimed.endpoint_id, claimed.event_id, claimed.attempts, e.type, e.payload, e.created_at, w.url, w.secret, w.previous_secret, w.previous_secret_expires_at
         FROM claimed JOIN chosen USING (endpoint_id, event_id) JOIN webhook_events e ON e.id = claimed.event_id JOIN webhook_endpoints w ON w.id = claimed.endpoint_id
         ORDER BY chosen.position`,
        [JSON.stringify(chosen), input.owner, input.leaseMs],
      );
      return rows.map((row) => claimedDelivery(row, input.now));
    }) as Promise<ClaimedDelivery[]>;
  }

  async finish(attempt: DeliveryAttempt): Promise<boolean> {
    const state = attempt.delivered ? "delivered" : attempt.nextAttemptAt === null ? "failed" : "pending";
    const [row] = await this.client<Array<{ finished: number }>>`
      WITH finished AS (
        UPDATE webhook_deliveries SET state = ${state}, attempts = attempts + 1, last_status = ${attempt.status}, last_response = ${attempt.response},
          last_attempt_at = ${attempt.now}, next_attempt_at = ${state === "pending" ? attempt.nextAttemptAt : null}, lease_owner = NULL, lease_until = NULL
        WHERE endpoint_id = ${attempt.endpointId} AND event_id = ${attempt.eventId} AND lease_owner = ${attempt.owner} AND state = 'pending'
        RETURNING endpoint_id
      ),
      endpoint AS (
        UPDATE webhook_endpoints SET
          failing_since = CASE WHEN ${attempt.delivered} THEN NULL ELSE coalesce(failing_since, ${attempt.now}::bigint) END,
          status = CASE WHEN NOT ${attempt.delivered} AND ${attempt.now}::bigint - coalesce(failing_since, ${attempt.now}::bigint) >= ${attempt.disableAfterMs}::bigint THEN 'disabled' ELSE status END,
          disabled_at = CASE WHEN NOT ${attempt.delivered} AND status = 'enabled' AND ${attempt.now}::bigint - coalesce(failing_since, ${attempt.now}::bigint) >= ${attempt.disableAfterMs}::bigint
                             THEN ${attempt.now}::bigint ELSE disabled_at END
        FROM finished WHERE webhook_endpoints.id = finished.endpoint_id
      )
      SELECT count(*)::int AS finished FROM finished`;
    return row!.finished === 1;
  }
}

function claimedDelivery(row: Record<string, string | number | null>, now: number): ClaimedDelivery {
  const previousValid = row.previous_secret !== null && row.previous_secret_expires_at !== null && Number(row.previous_secret_expires_at) > now;
  return {
    endpointId: row.endpoint_id as string,
    eventId: row.event_id as string,
    eventType: row.type as string,
    payload: row.payload as string,
    eventCreatedAt: Number(row.created_at),
    url: row.url as string,
    secrets: previousValid ? [row.secret as string, row.previous_secret as string] : [row.secret as string],
    attempts: Number(row.attempts),
  };
}
