import { t } from "elysia";
import { Int, PageQuery, pageOf, Timestamp } from "../../http/model";

export const ApiKeySchema = t.Object(
  {
    id: t.String({ examples: ["key_0mwrd57q90000brqra5jtuxfe"] }),
    name: t.String({ examples: ["production"] }),
    keyPrefix: t.String({ description: "The first 8 characters of the secret, safe to show and log", examples: ["pps_a1B2"] }),
    status: t.Union([t.Literal("ACTIVE"), t.Literal("ROTATED"), t.Literal("REVOKED")]),
    createdAt: Timestamp,
    lastUsedAt: t.Union([Timestamp, t.Null()], { description: "Last successful data request (written behind, up to a few seconds late)" }),
    createdBy: t.Object({ id: t.String(), name: t.String(), email: t.Union([t.String(), t.Null()]) }),
    replacedBy: t.Union([t.String(), t.Null()], { description: "Id of the key that replaced this one by rotation" }),
    expiresAt: t.Union([Timestamp, t.Null()], { description: "From this instant the key is refused (401); null: it never expires" }),
    monthlyCreditLimit: t.Union([Int({ minimum: 0 }), t.Null()], {
      description:
        "Credits the key may spend per calendar month (UTC); beyond it, 402 insufficient-credits until the 1st of next month. Null: only the organization's balance limits it",
    }),
    rateLimit: t.Union([Int({ minimum: 1 }), t.Null()], {
      description:
        "Requests per second on the data endpoint (bursts up to twice that); null: the service's RATE_LIMIT. The organization's own limit applies to all of its keys together besides",
    }),
    creditsSpentThisMonth: Int({ minimum: 0, description: "Credits the key's billed look-ups spent in the current calendar month (UTC)" }),
  },
  { description: "An API key; its secret is never shown again after creation or rotation" },
);

export const CreatedKeySchema = t.Object({
  key: ApiKeySchema,
  clearKey: t.String({ description: "The full secret, shown only in this response", examples: ["pps_…"] }),
});

export const KeyPageSchema = pageOf(ApiKeySchema);

export const KeyListQuery = t.Object({
  limit: PageQuery.limit,
  cursor: t.Optional(t.String({ pattern: "^key_[0-9a-z]{1,60}$", description: "Opaque cursor from nextCursor" })),
});

export const KeyParams = t.Object({ id: t.String({ maxLength: 100, description: "Key id", examples: ["key_0mwrd57q90000brqra5jtuxfe"] }) });

/** The per-key controls a body may set; each is optional, and null clears it. */
const KeyControlFields = {
  expiresAt: t.Optional(t.Union([Timestamp, t.Null()], { description: "A date-time in the future: from then on the key gets 401. Null: never expires" })),
  monthlyCreditLimit: t.Optional(
    t.Union([Int({ minimum: 0, maximum: 1_000_000_000_000 }), t.Null()], {
      description: "Credits the key may spend per calendar month (UTC); 0 stops its billed look-ups. Null: no limit of its own",
      examples: [5000],
    }),
  ),
  rateLimit: t.Optional(
    t.Union([Int({ minimum: 1, maximum: 1_000_000 }), t.Null()], {
      description: "Requests per second on the data endpoint, at most the service's RATE_LIMIT (larger is 422). Null: the service's RATE_LIMIT",
      examples: [10],
    }),
  ),
};

export const CreateKeyBody = t.Object({
  name: t.String({ minLength: 1, maxLength: 100, description: "1 to 100 characters, surrounding spaces trimmed", examples: ["production"] }),
  ...KeyControlFields,
});

export const UpdateKeyBody = t.Object(KeyControlFields, { description: "The controls to change; absent ones are kept, null clears one" });
