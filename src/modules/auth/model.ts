import { t } from "elysia";

export const SessionUserSchema = t.Object(
  {
    id: t.String({ examples: ["usr_0mwrd57q90000brqra5jtuxfe"] }),
    email: t.Union([t.String(), t.Null()], { examples: ["ada@example.com"] }),
    name: t.String({ examples: ["Ada Lovelace"] }),
    organization: t.Object({ id: t.String({ examples: ["org_0mwrd57q90000brqra5jtuxfe"] }), name: t.String({ examples: ["Analytical Engines Ltd"] }) }),
    role: t.Union([t.Literal("owner"), t.Literal("member")]),
  },
  { description: "The signed-in user" },
);

export const SessionResponse = t.Object({
  user: SessionUserSchema,
  expiresAt: t.String({ format: "date-time", description: "When the session ends unless refreshed", examples: ["2026-11-23T10:00:00.000Z"] }),
});

export const OIDCSignInBody = t.Object({
  idToken: t.String({ minLength: 1, maxLength: 16_384, description: "An ID token issued by OIDC_ISSUER to OIDC_CLIENT_ID" }),
});

export const DevelopmentSignInBody = t.Object({
  email: t.String({ format: "email", maxLength: 254, examples: ["dev@example.com"] }),
});
