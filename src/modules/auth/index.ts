import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { toISO } from "../../lib/clock";
import { CommonErrors, ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { assertSameOrigin, SESSION_COOKIE } from "./guard";
import { DevelopmentSignInBody, OIDCSignInBody, SessionResponse, SessionUserSchema } from "./model";
import { authPlugin, sessionPrincipal } from "./plugin";
import { developmentIdentity, type IssuedSession, refreshSession, sessionUser, signIn, signOut } from "./service";
import { clearedSessionCookie, isSecureCookie, readCookie, sessionCookie } from "./session-cookie";

const SIGN_IN_OFF = {
  en: "Sign-in is not configured on this service (OIDC_ISSUER is not set).",
  fr: "La connexion n'est pas configurée sur ce service (OIDC_ISSUER n'est pas défini).",
};
const USE_DEVELOPMENT_SIGN_IN = {
  en: "OIDC sign-in is not configured (OIDC_ISSUER is not set); in development mode use POST /api/v1/auth/dev-login.",
  fr: "La connexion OIDC n'est pas configurée (OIDC_ISSUER n'est pas défini) ; en mode développement, utilisez POST /api/v1/auth/dev-login.",
};
const NO_DEVELOPMENT_SIGN_IN = {
  en: "The development sign-in exists only in development mode without OIDC_ISSUER.",
  fr: "La connexion de développement n'existe qu'en mode développement sans OIDC_ISSUER.",
};

const NO_STORE = { "cache-control": "no-store" };

/**
 * Session endpoints: sign-in with an ID token of OIDC_ISSUER (or, in development mode without an
 * issuer, the built-in development sign-in), refresh, logout and the current user.
 */
export function authRoutes(services: Services) {
  const { config, store, clock, logger, oidc } = services;
  const deps = { store, clock, logger, trialCredits: config.trialCredits };
  const development = config.env === "development";
  const developmentSignIn = development && oidc === null;
  const secure = isSecureCookie(config);

  function startSession(session: IssuedSession, set: { headers: Record<string, unknown> }) {
    Object.assign(set.headers, NO_STORE, { "set-cookie": sessionCookie(session.token, session.expiresAt, clock.now(), secure) });
    return { user: session.user, expiresAt: toISO(session.expiresAt) };
  }

  function refuseWhenSignInIsOff(): undefined {
    if (oidc === null && !development) throw new Problem("unavailable", { detail: SIGN_IN_OFF });
    return undefined;
  }

  const sessionErrors = { ...CommonErrors, 401: ProblemSchema, 403: ProblemSchema, 503: ProblemSchema };

  return (
    new Elysia({ name: "auth.routes", prefix: "/api/v1/auth" })
      .use(authPlugin(services))
      .post(
        "/dev-login",
        async ({ body, request, set }) => {
          if (!developmentSignIn) throw new Problem("not-found", { detail: NO_DEVELOPMENT_SIGN_IN });
          assertSameOrigin(request, config.publicUrl);
          return startSession(await signIn(deps, developmentIdentity(body.email), "development"), set);
        },
        {
          body: DevelopmentSignInBody,
          response: { 200: SessionResponse, ...sessionErrors, 404: ProblemSchema, 409: ProblemSchema },
          detail: {
            summary: "DEVELOPMENT ONLY: sign in with just an email",
            description:
              "Exists only in development mode when OIDC_ISSUER is not set (404 otherwise). Takes the email at its word and opens the same session as /auth/oidc: first sign-in creates the user and its organization, or joins the organization that invited the email.",
            tags: ["Sessions"],
            operationId: "developmentSignIn",
            "x-response-headers": ["Set-Cookie"],
          },
        },
      )
      // Without an identity provider, production has no way to open a session: say so before anything
      // else, authentication included (which the POST routes run in their parse phase: see `parse` there).
      .onTransform(refuseWhenSignInIsOff)
      .post(
        "/oidc",
        async ({ body, request, set }) => {
          if (oidc === null) throw new Problem("unavailable", { detail: USE_DEVELOPMENT_SIGN_IN });
          // A forged cross-site sign-in would put the victim in the attacker's account (login CSRF).
          assertSameOrigin(request, config.publicUrl);
          const identity = await oidc.verifyIDToken(body.idToken);
          return startSession(await signIn(deps, identity, "oidc"), set);
        },
        {
          body: OIDCSignInBody,
          response: { 200: SessionResponse, ...sessionErrors, 409: ProblemSchema },
          detail: {
            summary: "Exchange an OIDC ID token for a session",
            description:
              "Verifies the ID token against OIDC_ISSUER (discovery, JWKS, audience OIDC_CLIENT_ID, exp/iat/nbf, asymmetric algorithms only) and sets the `session` cookie (HttpOnly, SameSite=Lax, Path=/, Secure), valid 24 h. The first sign-in creates the user and either joins the organization that invited its email or creates one with the trial credits. 401 for a bad token, 403 when the token has no verified email, 409 when the email belongs to another identity, 503 when the provider is unreachable or not configured.",
            tags: ["Sessions"],
            operationId: "signInWithOIDC",
            "x-response-headers": ["Set-Cookie"],
          },
        },
      )
      .post(
        "/refresh",
        async ({ request, set, principal }) => {
          sessionPrincipal(principal);
          return startSession(await refreshSession(deps, { token: readCookie(request, SESSION_COOKIE) ?? "" }), set);
        },
        {
          parse: refuseWhenSignInIsOff,
          auth: "session",
          response: { 200: SessionResponse, ...sessionErrors },
          detail: {
            summary: "Refresh the session",
            description:
              "Issues a new session token in the `session` cookie (the presented one stops working at once) and extends the session by 24 h, up to 30 days after sign-in. Session cookie only.",
            tags: ["Sessions"],
            operationId: "refreshSession",
            "x-response-headers": ["Set-Cookie"],
            security: [{ session: [] }],
          },
        },
      )
      .post(
        "/logout",
        async ({ set, principal }) => {
          const session = sessionPrincipal(principal);
          await signOut(deps, { sessionId: session.sessionId, userId: session.userId });
          Object.assign(set.headers, NO_STORE, { "set-cookie": clearedSessionCookie(secure) });
          set.status = 204;
          return null;
        },
        {
          parse: refuseWhenSignInIsOff,
          auth: "session",
          response: { 204: t.Null({ description: "Signed out; the cookie is cleared" }), ...sessionErrors },
          detail: {
            summary: "Sign out",
            description: "Invalidates the session server-side and clears the `session` cookie. Session cookie only.",
            tags: ["Sessions"],
            operationId: "signOut",
            "x-response-headers": ["Set-Cookie"],
            security: [{ session: [] }],
          },
        },
      )
      .get(
        "/me",
        async ({ set, principal }) => {
          const session = sessionPrincipal(principal);
          const found = await store.findSessionWithUser(session.sessionId);
          if (found === null) throw new Problem("unauthorized");
          Object.assign(set.headers, NO_STORE);
          return sessionUser(store, found.user);
        },
        {
          auth: "session",
          response: { 200: SessionUserSchema, ...sessionErrors },
          detail: {
            summary: "The signed-in user",
            description: "The user and organization of the `session` cookie.",
            tags: ["Sessions"],
            operationId: "getCurrentUser",
            security: [{ session: [] }],
          },
        },
      )
  );
}
