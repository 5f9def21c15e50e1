import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { decodePendingSignIn, encodePendingSignIn, PENDING_SIGN_IN_COOKIE } from "../../src/modules/auth/code-flow";
import { createOIDCVerifier } from "../../src/modules/auth/oidc";
import { createTestContext, json, type TestContext } from "../support/context";
import { startJWKSServer } from "../auth/jwks-server";
import { CLIENT_ID, CLIENT_SECRET, startTestOpenIDProvider, type TestOpenIDProvider } from "../auth/oidc-provider";

const PUBLIC_URL = "http://localhost:8080"; // the test config's PUBLIC_URL
const CALLBACK = `${PUBLIC_URL}/api/v1/auth/oidc/callback`;

let provider: TestOpenIDProvider;

beforeAll(async () => {
  provider = await startTestOpenIDProvider(
    { ada: { email: "ada@example.com", name: "Ada Lovelace" }, eve: { email: "eve@example.com", emailVerified: false } },
    { redirectURIs: [CALLBACK], requirePKCE: true },
  );
});

afterAll(async () => {
  await provider.close();
});

async function codeFlowContext(env: Record<string, string> = {}): Promise<TestContext> {
  const context = await createTestContext({
    OIDC_ISSUER: provider.issuer,
    OIDC_CLIENT_ID: CLIENT_ID,
    OIDC_CLIENT_SECRET: CLIENT_SECRET,
    TRIAL_CREDITS: "5",
    ...env,
  });
  context.clock.set(Date.now()); // the provider signs with the real time
  return context;
}

/** The `name=value` of a Set-Cookie line of `response` for cookie `name`. */
function cookieOf(response: Response, name: string): string | null {
  const line = response.headers.getSetCookie().find((candidate) => candidate.startsWith(`${name}=`));
  return line === undefined ? null : line.split(";")[0]!;
}

/** GET /start, then the provider's login and consent: the callback URL and the cookie /start set. */
async function startAndAuthorize(context: TestContext, account: string, next?: string): Promise<{ callback: URL; pendingCookie: string; start: Response }> {
  const start = await context.request(`/api/v1/auth/oidc/start${next === undefined ? "" : `?next=${encodeURIComponent(next)}`}`);
  expect(start.status).toBe(302);
  const pendingCookie = cookieOf(start, PENDING_SIGN_IN_COOKIE)!;
  const callback = await provider.authorize(start.headers.get("location")!, account, CALLBACK);
  return { callback, pendingCookie, start };
}

function finish(context: TestContext, callback: URL, cookie: string | null): Promise<Response> {
  return context.request(callback.pathname + callback.search, { headers: cookie === null ? {} : { cookie } });
}

describe("the browser sign-in (OIDC authorization code with PKCE)", () => {
  test("start sends the browser to the issuer with state, nonce and an S256 challenge, and keeps them in a short-lived HttpOnly cookie", async () => {
    const context = await codeFlowContext();
    const start = await context.request("/api/v1/auth/oidc/start?next=/dashboard/billing");
    expect(start.status).toBe(302);
    expect(start.headers.get("cache-control")).toBe("no-store");
    const location = new URL(start.headers.get("location")!);
    expect(location.origin + location.pathname).toBe(`${provider.issuer}/auth`);
    const query = Object.fromEntries(location.searchParams);
    expect(query).toMatchObject({
      response_type: "code",
      client_id: CLIENT_ID,
      redirect_uri: CALLBACK,
      scope: "openid email profile",
      code_challenge_method: "S256",
    });
    expect(query.code_challenge).toMatch(/^[A-Za-z0-9_-]{43}$/);

    const line = start.headers.getSetCookie().find((candidate) => candidate.startsWith(`${PENDING_SIGN_IN_COOKIE}=`))!;
    expect(line).toContain("HttpOnly");
    expect(line).toContain("SameSite=Lax");
    expect(line).toContain("Max-Age=600");
    expect(line).toContain("Path=/api/v1/auth/oidc/callback");
    const pending = decodePendingSignIn(line.split(";")[0]!.slice(PENDING_SIGN_IN_COOKIE.length + 1))!;
    expect(pending).toMatchObject({ state: query.state, nonce: query.nonce, next: "/dashboard/billing" });
    // The verifier itself never leaves the service except to the token endpoint.
    expect(location.href).not.toContain(pending.codeVerifier);
    const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(pending.codeVerifier)));
    expect(Buffer.from(digest).toString("base64url")).toBe(query.code_challenge!);
    await context.close();
  });

  test("the callback exchanges the code, opens a session as POST /auth/oidc does, and lands on the page asked for", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada", "/dashboard/billing");
    expect(callback.searchParams.get("iss")).toBe(provider.issuer);
    const finished = await finish(context, callback, pendingCookie);
    expect(finished.status).toBe(303);
    expect(finished.headers.get("location")).toBe("/dashboard/billing");
    expect(cookieOf(finished, PENDING_SIGN_IN_COOKIE)).toBe(`${PENDING_SIGN_IN_COOKIE}=`);
    const sessionLine = finished.headers.getSetCookie().find((line) => line.startsWith("session="))!;
    expect(sessionLine).toMatch(/^session=ses_[0-9a-z]+\.[0-9a-z]{40,}; Max-Age=86400; Path=\/; HttpOnly; SameSite=Lax$/);

    const me = await context.request("/api/v1/auth/me", { headers: { cookie: sessionLine.split(";")[0]! } });
    expect(me.status).toBe(200);
    const user = await json(me);
    expect(user).toMatchObject({ email: "ada@example.com", name: "Ada Lovelace", role: "owner" });
    expect((await context.store.getBalance(user.organization.id, context.clock.now())).available).toBe(5);

    // A second sign-in of the same person finds the same user and organization.
    const again = await startAndAuthorize(context, "ada");
    const second = await finish(context, again.callback, again.pendingCookie);
    const secondCookie = cookieOf(second, "session")!;
    expect(await json(await context.request("/api/v1/auth/me", { headers: { cookie: secondCookie } }))).toEqual(user);
    expect((await context.store.listOrganizations()).length).toBe(1);

    context.services.logger.flush();
    const log = context.logs.join("");
    expect(log).toContain('"method":"oidc"');
    expect(log).not.toContain(callback.searchParams.get("code")!);
    expect(log).not.toContain(sessionLine.split(";")[0]!.slice("session=".length));
    await context.close();
  });

  test("a callback without the cookie of its start, or with another state, opens no session and says the sign-in expired", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada");
    const withoutCookie = await finish(context, callback, null);
    expect(withoutCookie.status).toBe(303);
    expect(withoutCookie.headers.get("location")).toBe("/dashboard/sign-in?error=expired&next=%2Fdashboard");
    expect(cookieOf(withoutCookie, "session")).toBeNull();

    const forged = new URL(callback);
    forged.searchParams.set("state", "attacker-state");
    const wrongState = await finish(context, forged, pendingCookie);
    expect(wrongState.headers.get("location")).toStartWith("/dashboard/sign-in?error=expired");
    expect(cookieOf(wrongState, "session")).toBeNull();
    expect((await context.store.listOrganizations()).length).toBe(0);
    await context.close();
  });

  test("a code redeemed with another PKCE verifier is refused by the provider, and no session opens", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada");
    const pending = decodePendingSignIn(pendingCookie.slice(PENDING_SIGN_IN_COOKIE.length + 1))!;
    const tampered = `${PENDING_SIGN_IN_COOKIE}=${encodePendingSignIn({ ...pending, codeVerifier: "x".repeat(43) })}`;
    const finished = await finish(context, callback, tampered);
    expect(finished.headers.get("location")).toStartWith("/dashboard/sign-in?error=unauthorized");
    expect(cookieOf(finished, "session")).toBeNull();
    context.services.logger.flush();
    expect(context.logs.join("")).toContain('"error":"invalid_grant"');
    await context.close();
  });

  test("an ID token whose nonce is not the one this sign-in sent is refused", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada");
    const pending = decodePendingSignIn(pendingCookie.slice(PENDING_SIGN_IN_COOKIE.length + 1))!;
    const otherNonce = `${PENDING_SIGN_IN_COOKIE}=${encodePendingSignIn({ ...pending, nonce: "another-nonce" })}`;
    const finished = await finish(context, callback, otherNonce);
    expect(finished.headers.get("location")).toStartWith("/dashboard/sign-in?error=unauthorized");
    expect(cookieOf(finished, "session")).toBeNull();
    context.services.logger.flush();
    expect(context.logs.join("")).toContain('"reason":"nonce"');
    await context.close();
  });

  test("the verifier checks the nonce only when one is expected", async () => {
    const context = await createTestContext();
    const idp = await startJWKSServer({ clientId: CLIENT_ID, now: () => context.clock.now() });
    const verifier = createOIDCVerifier({
      issuer: idp.issuer,
      clientId: CLIENT_ID,
      clock: context.clock,
      logger: context.services.logger,
      outbound: context.services.outbound,
    });
    const token = await idp.sign({ nonce: "n-1" });
    expect((await verifier.verifyIDToken(token, { nonce: "n-1" })).email).toBe("ada@example.com");
    expect((await verifier.verifyIDToken(token)).email).toBe("ada@example.com");
    await expect(verifier.verifyIDToken(token, { nonce: "n-2" })).rejects.toMatchObject({ slug: "unauthorized" });
    await expect(verifier.verifyIDToken(await idp.sign({}), { nonce: "n-1" })).rejects.toMatchObject({ slug: "unauthorized" });
    idp.close();
    await context.close();
  });

  test("a sign-in canceled at the provider, or a person with an unverified email, lands on the sign-in page with the reason", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada");
    const denied = new URL(`${CALLBACK}?error=access_denied&state=${callback.searchParams.get("state")}`);
    expect((await finish(context, denied, pendingCookie)).headers.get("location")).toStartWith("/dashboard/sign-in?error=denied");

    const eve = await startAndAuthorize(context, "eve");
    const unverified = await finish(context, eve.callback, eve.pendingCookie);
    expect(unverified.headers.get("location")).toStartWith("/dashboard/sign-in?error=forbidden");
    expect(cookieOf(unverified, "session")).toBeNull();
    await context.close();
  });

  test("an authorization response naming another issuer is refused (RFC 9207 mix-up defence)", async () => {
    const context = await codeFlowContext();
    const { callback, pendingCookie } = await startAndAuthorize(context, "ada");
    const mixedUp = new URL(callback);
    mixedUp.searchParams.set("iss", "https://evil.example");
    const finished = await finish(context, mixedUp, pendingCookie);
    expect(finished.headers.get("location")).toStartWith("/dashboard/sign-in?error=provider");
    expect(cookieOf(finished, "session")).toBeNull();
    await context.close();
  });

  test("after sign-in the browser goes only to a dashboard page, never to another site", async () => {
    const context = await codeFlowContext();
    for (const next of ["https://evil.example/", "//evil.example", "/dashboard/../api/v1/auth/me", "/dashboard/sign-in"]) {
      const { callback, pendingCookie } = await startAndAuthorize(context, "ada", next);
      expect((await finish(context, callback, pendingCookie)).headers.get("location")).toBe("/dashboard");
    }
    await context.close();
  });

  test("without an identity provider the browser sign-in answers 503 unavailable", async () => {
    const context = await createTestContext();
    const start = await context.request("/api/v1/auth/oidc/start");
    expect(start.status).toBe(503);
    expect(start.headers.get("content-type")).toBe("application/problem+json");
    expect((await json(start)).type).toEndWith("/unavailable");
    expect((await context.request("/api/v1/auth/oidc/callback?code=x&state=y")).status).toBe(503);
    await context.close();
  });
});
