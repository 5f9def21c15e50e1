import { t } from "elysia";
import { PageQuery, pageOf, Timestamp } from "../../http/model";

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

export const CreateKeyBody = t.Object({
  name: t.String({ minLength: 1, maxLength: 100, description: "1 to 100 characters, surrounding spaces trimmed", examples: ["production"] }),
});
