import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { secretsMatch } from "../../lib/crypto";
import {
  createOIDCCodeFlowClient,
  decodePendingSignIn,
  encodePendingSignIn,
  newPendingSignIn,
  PENDING_SIGN_IN_COOKIE,
  PENDING_SIGN_IN_MAX_AGE_SECONDS,
} from "../auth/code-flow";
import { signIn } from "../auth/service";
import { isSecureCookie, readCookie, sessionCookie } from "../auth/session-cookie";

export const CALLBACK_PATH = "/api/v1/auth/oidc/callback";
const SIGN_IN_PAGE = "/dashboard/sign-in";
const NOT_CONFIGURED = {
  en: "Browser sign-in needs OIDC_ISSUER and OIDC_CLIENT_ID; in development mode without them, use the development sign-in of /dashboard/sign-in.",
  fr: "La connexion par navigateur exige OIDC_ISSUER et OIDC_CLIENT_ID ; en mode développement sans eux, utilisez la connexion de développement de /dashboard/sign-in.",
};

// An empty string, not t.Null: the OpenAPI plugin writes a void schema where a content map belongs.
const Redirect = (where: string) => t.String({ maxLength: 0, description: `Redirect: the Location header leads to ${where}` });

/** Only a dashboard page may follow a sign-in: anything else would be an open redirect. */
export function dashboardPath(next: string | undefined): string {
  return next !== undefined && /^\/dashboard(\/[a-z-]+)?$/.test(next) && next !== SIGN_IN_PAGE ? next : "/dashboard";
}

function withoutTrailingSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

/**
 * The browser sign-in of the dashboard: GET /api/v1/auth/oidc/start sends the browser to OIDC_ISSUER
 * (authorization-code flow, PKCE S256, state and nonce kept in a short-lived HttpOnly cookie), and
 * GET /api/v1/auth/oidc/callback exchanges the code, verifies the ID token with the verifier of
 * POST /auth/oidc plus the nonce, opens the same session and lands on the dashboard.
 */
export function oidcSignInRoutes(services: Services) {
  const { config, store, clock, logger, oidc, outbound } = services;
  const client =
    oidc !== null && config.oidcIssuer !== null && config.oidcClientId !== null
      ? createOIDCCodeFlowClient({ issuer: config.oidcIssuer, clientId: config.oidcClientId, clientSecret: config.oidcClientSecret, logger, outbound })
      : null;
  const redirectURI = `${config.publicUrl}${CALLBACK_PATH}`;
  const secure = isSecureCookie(config);
  const deps = { store, clock, logger, trialCredits: config.trialCredits };
  const pendingCookie = (value: string, maxAge: number) =>
    `${PENDING_SIGN_IN_COOKIE}=${value}; Max-Age=${maxAge}; Path=${CALLBACK_PATH}; HttpOnly; SameSite=Lax${secure ? "; Secure" : ""}`;

  return new Elysia({ name: "dashboard.sign-in" })
    .get(
      "/api/v1/auth/oidc/start",
      async ({ query }) => {
        if (client === null) throw new Problem("unavailable", { detail: NOT_CONFIGURED });
        const pending = newPendingSignIn(dashboardPath(query.next));
        const location = await client.authorizationURL(pending, redirectURI);
        return new Response(null, {
          status: 302,
          headers: { location, "cache-control": "no-store", "set-cookie": pendingCookie(encodePendingSignIn(pending), PENDING_SIGN_IN_MAX_AGE_SECONDS) },
        });
      },
      {
        query: t.Object({
          next: t.Optional(
            t.String({ maxLength: 200, description: "Dashboard page to land on after sign-in (default /dashboard)", examples: ["/dashboard/billing"] }),
          ),
        }),
        response: { 302: Redirect("the issuer's authorization endpoint"), 400: ProblemSchema, 500: ProblemSchema, 503: ProblemSchema },
        detail: {
          summary: "Start the browser sign-in (OIDC authorization code + PKCE)",
          description: `For browsers: redirects to OIDC_ISSUER's authorization endpoint with state, nonce and an S256 code challenge, which a short-lived HttpOnly cookie keeps for the callback. Register \`{PUBLIC_URL}${CALLBACK_PATH}\` as a redirect URI of OIDC_CLIENT_ID. 503 when no issuer is configured or it cannot be reached.`,
          tags: ["Sessions"],
          operationId: "startBrowserSignIn",
          "x-response-headers": ["Set-Cookie"],
          security: [],
        },
      },
    )
    .get(
      CALLBACK_PATH,
      async ({ query, request }) => {
        if (client === null || oidc === null) throw new Problem("unavailable", { detail: NOT_CONFIGURED });
        const pending = decodePendingSignIn(readCookie(request, PENDING_SIGN_IN_COOKIE));
        const headers = new Headers({ "cache-control": "no-store" });
        headers.append("set-cookie", pendingCookie("", 0));
        const land = (location: string) => {
          headers.set("location", location);
          return new Response(null, { status: 303, headers });
        };
        const fail = (reason: string) => {
          logger.info("browser sign-in failed", { reason });
          return land(`${SIGN_IN_PAGE}?error=${reason}&next=${encodeURIComponent(dashboardPath(pending?.next))}`);
        };
        // The state ties this callback to the browser that started the sign-in (login CSRF).
        if (pending === null || query.state === undefined || !secretsMatch(query.state, pending.state)) return fail("expired");
        if (query.error !== undefined) return fail(query.error === "access_denied" ? "denied" : "provider");
        // RFC 9207: a provider that names itself must be ours (mix-up attacks).
        if (query.iss !== undefined && withoutTrailingSlash(query.iss) !== withoutTrailingSlash(config.oidcIssuer!)) return fail("provider");
        if (query.code === undefined) return fail("provider");
        try {
          const idToken = await client.exchangeCode(query.code, pending, redirectURI);
          const identity = await oidc.verifyIDToken(idToken, { nonce: pending.nonce });
          const session = await signIn(deps, identity, "oidc");
          headers.append("set-cookie", sessionCookie(session.token, session.expiresAt, clock.now(), secure));
          // Checked again: the cookie came back from the browser.
          return land(dashboardPath(pending.next));
        } catch (error) {
          if (error instanceof Problem) return fail(error.slug);
          throw error;
        }
      },
      {
        query: t.Object({
          code: t.Optional(t.String({ maxLength: 2048 })),
          state: t.Optional(t.String({ maxLength: 512 })),
          iss: t.Optional(t.String({ maxLength: 2048 })),
          error: t.Optional(t.String({ maxLength: 256 })),
          error_description: t.Optional(t.String({ maxLength: 2048 })),
        }),
        response: { 303: Redirect("the dashboard (signed in), or its sign-in page with ?error="), 400: ProblemSchema, 500: ProblemSchema, 503: ProblemSchema },
        detail: {
          summary: "Finish the browser sign-in",
          description:
            "The issuer sends the browser here. The state must match the cookie set by /start; the code is exchanged at the token endpoint with the PKCE verifier (and OIDC_CLIENT_SECRET when set); the ID token is verified as for POST /api/v1/auth/oidc, nonce included. Then the `session` cookie is set and the browser goes to the dashboard. A failure leads to /dashboard/sign-in?error=<reason> (expired, denied, provider, unauthorized, forbidden, conflict, unavailable).",
          tags: ["Sessions"],
          operationId: "finishBrowserSignIn",
          "x-response-headers": ["Set-Cookie"],
          security: [],
        },
      },
    );
}
