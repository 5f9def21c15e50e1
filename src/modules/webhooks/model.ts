import { t } from "elysia";
import { WEBHOOK_EVENT_TYPES } from "../../db/webhooks/records";
import { Int, PageQuery, pageOf, Timestamp } from "../../http/model";

const EventType = t.UnionEnum(WEBHOOK_EVENT_TYPES, { description: "An event type an endpoint may subscribe to" });

export const WebhookEndpointSchema = t.Object(
  {
    id: t.String({ examples: ["whe_0mwrd57q90000brqra5jtuxfe"] }),
    url: t.String({ format: "uri", examples: ["https://hooks.example.com/price-service"] }),
    eventTypes: t.Array(EventType, { examples: [["credits.low", "credits.depleted"]] }),
    status: t.Union([t.Literal("enabled"), t.Literal("disabled")], {
      description: "disabled after a day of failed deliveries; nothing is sent to a disabled endpoint",
    }),
    failingSince: t.Union([Timestamp, t.Null()], { description: "First failed attempt since the last successful one" }),
    disabledAt: t.Union([Timestamp, t.Null()]),
    createdAt: Timestamp,
  },
  { description: "A webhook endpoint; its signing secret is shown only when it is created or rotated" },
);

export const EndpointWithSecretSchema = t.Object({
  endpoint: WebhookEndpointSchema,
  secret: t.String({
    description: "The Standard Webhooks signing secret (whsec_…), shown only in this response",
    examples: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
  }),
});

export const EndpointPageSchema = pageOf(WebhookEndpointSchema);

export const CreateEndpointBody = t.Object({
  url: t.String({
    minLength: 1,
    maxLength: 2000,
    description: "An https URL (plain http only to networks in OUTBOUND_ALLOWED_NETWORKS, or in development mode)",
    examples: ["https://hooks.example.com/price-service"],
  }),
  eventTypes: t.Array(EventType, { minItems: 1, maxItems: WEBHOOK_EVENT_TYPES.length, uniqueItems: true }),
});

export const EndpointParams = t.Object({ id: t.String({ maxLength: 100, description: "Endpoint id", examples: ["whe_0mwrd57q90000brqra5jtuxfe"] }) });

export const EndpointListQuery = t.Object({
  limit: PageQuery.limit,
  cursor: t.Optional(t.String({ pattern: "^whe_[0-9a-z]{1,60}$", description: "Opaque cursor from nextCursor" })),
});

export const DeliveryListQuery = t.Object({ limit: PageQuery.limit, cursor: PageQuery.cursor });

export const DeliverySchema = t.Object(
  {
    eventId: t.String({ description: "The event's id, sent as `webhook-id` (the same on every attempt)", examples: ["msg_0mwrd57q90000brqra5jtuxfe"] }),
    eventType: t.String({ examples: ["credits.low"] }),
    state: t.Union([t.Literal("pending"), t.Literal("delivered"), t.Literal("failed")], {
      description: "failed: every retry failed, or the endpoint was disabled",
    }),
    attempts: Int({ minimum: 0 }),
    lastStatus: t.Union([Int(), t.Null()], { description: "HTTP status of the last attempt; null when none came (refused address, network error, time-out)" }),
    lastResponse: t.Union([t.String(), t.Null()], { description: "The first 256 bytes of the last response body, or what went wrong" }),
    lastAttemptAt: t.Union([Timestamp, t.Null()]),
    nextAttemptAt: t.Union([Timestamp, t.Null()], { description: "When the next attempt is due; null once delivered or failed" }),
    createdAt: Timestamp,
  },
  { description: "One event sent to one endpoint" },
);

export const DeliveryPageSchema = pageOf(DeliverySchema);

export const TestEventSchema = t.Object({ eventId: t.String({ examples: ["msg_0mwrd57q90000brqra5jtuxfe"] }) });

export const WebhookSettingsSchema = t.Object({
  lowCreditThreshold: t.Union([Int({ minimum: 1, maximum: 1_000_000_000_000 }), t.Null()], {
    description: "A `credits.low` event is sent when a debit takes the balance from at least this to below it; null: never",
    examples: [100],
  }),
});
