import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { OIDCVerifier } from "../../src/modules/auth/oidc";
import { createTestContext, json, queryRows, signIn, type TestContext, type TestSession } from "../support/context";
import { securityTests, storedText } from "../support/security";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const ORIGIN = "http://localhost:8080";

let context: TestContext;

beforeEach(async () => {
  context = await createTestContext({ TRIAL_CREDITS: "3" });
});

afterEach(async () => {
  await context.close();
});

function devLogin(email: string, headers: Record<string, string> = {}, target: TestContext = context) {
  return target.request("/api/v1/auth/dev-login", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ email }),
  });
}

function post(path: string, headers: Record<string, string>, target: TestContext = context) {
  return target.request(path, { method: "POST", headers });
}

function me(headers: Record<string, string>, target: TestContext = context) {
  return target.request("/api/v1/auth/me", { headers });
}

function cookieOf(response: Response): { cookie: string } {
  return { cookie: (response.headers.get("set-cookie") ?? "").split(";")[0]! };
}

/** A verifier that accepts any token as the given identity: the OIDCVerifier seam, without a provider. */
function acceptingVerifier(email: string): OIDCVerifier {
  return {
    issuer: "https://id.example.com",
    verifyIDToken: async () => ({ subject: `https://id.example.com#${email}`, email, emailVerified: true, name: "Test User" }),
  };
}

describe("POST /api/v1/auth/dev-login (development mode without OIDC_ISSUER)", () => {
  test("it signs the email in with the same session as /auth/oidc, creating the user and an organization with trial credits", async () => {
    const response = await devLogin("Dev@Example.com", { origin: ORIGIN });
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body).toEqual({
      user: {
        id: expect.stringMatching(/^usr_/),
        email: "dev@example.com",
        name: "dev",
        organization: { id: expect.stringMatching(/^org_/), name: "dev" },
        role: "owner",
      },
      expiresAt: new Date(context.clock.now() + DAY).toISOString(),
    });
    expect(response.headers.get("set-cookie")).toMatch(/^session=ses_[0-9a-z]+\.[0-9a-z]+; Max-Age=86400; Path=\/; HttpOnly; SameSite=Lax$/);
    const balance = await context.store.getBalance(body.user.organization.id, context.clock.now());
    expect(balance.available).toBe(3);
    expect(balance.buckets).toMatchObject([{ source: "trial", granted: 3, remaining: 3, expiresAt: null }]);
    expect((await me(cookieOf(response))).status).toBe(200);
  });

  test("a second sign-in of the same email finds the same user, and both sessions work", async () => {
    const first = await devLogin("dev@example.com");
    const second = await devLogin("DEV@example.com");
    expect((await json(second)).user).toEqual((await json(first)).user);
    expect((await me(cookieOf(first))).status).toBe(200);
    expect((await me(cookieOf(second))).status).toBe(200);
    expect(await context.store.listOrganizations()).toHaveLength(1);
  });

  test("an invited email joins the inviting organization with the invited role, and the invitation is used up", async () => {
    const owner = await json(await devLogin("owner@example.com"));
    await context.store.upsertInvitation({
      email: "new@example.com",
      organizationId: owner.user.organization.id,
      role: "member",
      createdAt: context.clock.now(),
    });
    const joined = await json(await devLogin("new@example.com"));
    expect(joined.user).toMatchObject({ role: "member", organization: owner.user.organization });
    expect((await context.store.getBalance(owner.user.organization.id, context.clock.now())).available).toBe(3);
    const invitations = await queryRows(context.store, "SELECT email FROM invitations");
    expect(invitations).toEqual([]);
  });

  test("without TRIAL_CREDITS a new organization starts with no bucket and no ledger row", async () => {
    const plain = await createTestContext();
    const body = await json(await devLogin("plain@example.com", {}, plain));
    expect((await plain.store.getBalance(body.user.organization.id, plain.clock.now())).buckets).toEqual([]);
    expect((await plain.store.listTransactions(body.user.organization.id, { limit: 5 })).items).toEqual([]);
    await plain.close();
  });

  test("an invalid email is 422 unprocessable-body", async () => {
    for (const email of ["", "not-an-email", `${"a".repeat(250)}@example.com`]) {
      const response = await devLogin(email);
      expect(response.status).toBe(422);
      expect((await json(response)).type).toEndWith("/unprocessable-body");
    }
  });

  test("a cross-site development sign-in is 403 forbidden", async () => {
    const response = await devLogin("dev@example.com", { origin: "https://evil.example.com" });
    expect(response.status).toBe(403);
    expect(response.headers.get("set-cookie")).toBeNull();
  });

  test("it does not exist in production mode, nor when OIDC_ISSUER is set", async () => {
    const production = await createTestContext({ PRICE_ENV: "production" });
    const withIssuer = await createTestContext({ OIDC_ISSUER: "http://127.0.0.1:9", OIDC_CLIENT_ID: "x" });
    for (const target of [production, withIssuer]) {
      const response = await devLogin("dev@example.com", {}, target);
      expect(response.status).toBe(404);
      expect((await json(response)).type).toEndWith("/not-found");
      expect(await target.store.listOrganizations()).toEqual([]);
      await target.close();
    }
  });
});

describe("sign-in configuration", () => {
  test("in production mode without OIDC_ISSUER every session endpoint answers 503 unavailable", async () => {
    const production = await createTestContext({ PRICE_ENV: "production" });
    const calls = [
      production.request("/api/v1/auth/oidc", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ idToken: "x.y.z" }) }),
      post("/api/v1/auth/refresh", {}, production),
      post("/api/v1/auth/logout", {}, production),
      me({}, production),
    ];
    for (const response of await Promise.all(calls)) {
      expect(response.status).toBe(503);
      const body = await json(response);
      expect(body.type).toEndWith("/unavailable");
      expect(body.detail).toContain("OIDC_ISSUER");
    }
    await production.close();
  });

  test("in development mode without OIDC_ISSUER, /auth/oidc answers 503 and points at the development sign-in", async () => {
    const response = await context.request("/api/v1/auth/oidc", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ idToken: "x.y.z" }),
    });
    expect(response.status).toBe(503);
    expect((await json(response)).detail).toContain("/api/v1/auth/dev-login");
  });

  test("the session cookie is Secure in production mode, and in development mode behind https", async () => {
    const production = await createTestContext(
      { PRICE_ENV: "production", OIDC_ISSUER: "https://id.example.com", OIDC_CLIENT_ID: "x" },
      { oidc: acceptingVerifier("p@example.com") },
    );
    const https = await createTestContext(
      { PUBLIC_URL: "https://prices.example.com", OIDC_ISSUER: "https://id.example.com", OIDC_CLIENT_ID: "x" },
      { oidc: acceptingVerifier("h@example.com") },
    );
    for (const target of [production, https]) {
      const response = await target.request("/api/v1/auth/oidc", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ idToken: "x.y.z" }),
      });
      expect(response.status).toBe(200);
      expect(response.headers.get("set-cookie")).toEndWith("; Path=/; HttpOnly; SameSite=Lax; Secure");
      await target.close();
    }
  });
});

describe("GET /api/v1/auth/me", () => {
  test("it answers the signed-in user and organization", async () => {
    const session = await signIn(context, "ada@example.com");
    const response = await me(session.headers);
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const organization = await context.store.getOrganization(session.organizationId);
    expect(await json(response)).toEqual({
      id: session.userId,
      email: "ada@example.com",
      name: "ada",
      organization: { id: organization!.id, name: organization!.name },
      role: "owner",
    });
  });

  test("a session still works just before its 24 h are up", async () => {
    const session = await signIn(context, "ada@example.com");
    context.clock.advance(DAY - 1000);
    expect((await me(session.headers)).status).toBe(200);
  });

  securityTests({ method: "GET", path: () => "/api/v1/auth/me", accepts: "session" }, () => context);
});

describe("POST /api/v1/auth/refresh", () => {
  let session: TestSession;

  beforeEach(async () => {
    session = await signIn(context, "ada@example.com");
  });

  test("it issues a new token, extends the session by 24 h, and the old token stops working at once", async () => {
    context.clock.advance(20 * HOUR);
    const response = await post("/api/v1/auth/refresh", { ...session.headers, origin: ORIGIN });
    expect(response.status).toBe(200);
    expect(response.headers.get("cache-control")).toBe("no-store");
    const body = await json(response);
    expect(body.expiresAt).toBe(new Date(context.clock.now() + DAY).toISOString());
    expect(body.user.id).toBe(session.userId);
    const fresh = cookieOf(response);
    expect(fresh.cookie).not.toBe(session.headers.cookie);
    expect(fresh.cookie.split(".")[0]).toBe(session.headers.cookie.split(".")[0]!);
    expect((await me(session.headers)).status).toBe(401);
    context.clock.advance(20 * HOUR); // past the first 24 h, inside the extension
    expect((await me(fresh)).status).toBe(200);
  });

  test("refreshing with a token that was already refreshed is 401", async () => {
    await post("/api/v1/auth/refresh", session.headers);
    const again = await post("/api/v1/auth/refresh", session.headers);
    expect(again.status).toBe(401);
  });

  test("of two concurrent refreshes with one token, exactly one gets a new token", async () => {
    const responses = await Promise.all([post("/api/v1/auth/refresh", session.headers), post("/api/v1/auth/refresh", session.headers)]);
    expect(responses.map((response) => response.status).sort()).toEqual([200, 401]);
  });

  test("refreshes stop extending the session 30 days after sign-in", async () => {
    const signedInAt = context.clock.now();
    const end = signedInAt + 30 * DAY;
    let headers: { cookie: string } = session.headers;
    let last: Response | null = null;
    while (context.clock.now() + DAY < end) {
      context.clock.advance(23 * HOUR);
      last = await post("/api/v1/auth/refresh", headers);
      expect(last.status).toBe(200);
      headers = cookieOf(last);
    }
    expect((await json(last!)).expiresAt).toBe(new Date(end).toISOString());
    expect(last!.headers.get("set-cookie")).toContain(`Max-Age=${Math.round((end - context.clock.now()) / 1000)};`);
    context.clock.set(end);
    expect((await me(headers)).status).toBe(401);
    expect((await post("/api/v1/auth/refresh", headers)).status).toBe(401);
  });

  securityTests({ method: "POST", path: () => "/api/v1/auth/refresh", accepts: "session" }, () => context);
});

describe("POST /api/v1/auth/logout", () => {
  test("it answers 204, clears the cookie, and the session no longer works", async () => {
    const session = await signIn(context, "ada@example.com");
    const response = await post("/api/v1/auth/logout", { ...session.headers, origin: ORIGIN });
    expect(response.status).toBe(204);
    expect(await response.text()).toBe("");
    expect(response.headers.get("set-cookie")).toBe("session=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path=/; HttpOnly; SameSite=Lax");
    expect((await me(session.headers)).status).toBe(401);
    expect((await post("/api/v1/auth/refresh", session.headers)).status).toBe(401);
    expect((await post("/api/v1/auth/logout", session.headers)).status).toBe(401);
  });

  test("signing out one session leaves the user's other sessions alone", async () => {
    const laptop = await signIn(context, "ada@example.com");
    const phone = await signIn(context, "ada@example.com");
    expect((await post("/api/v1/auth/logout", laptop.headers)).status).toBe(204);
    expect((await me(phone.headers)).status).toBe(200);
  });

  test("a cross-site logout is refused and the session survives", async () => {
    const session = await signIn(context, "ada@example.com");
    expect((await post("/api/v1/auth/logout", { ...session.headers, origin: "https://evil.example.com" })).status).toBe(403);
    expect((await me(session.headers)).status).toBe(200);
  });

  securityTests({ method: "POST", path: () => "/api/v1/auth/logout", accepts: "session" }, () => context);
});

describe("session storage", () => {
  test("the session sweep deletes revoked and expired sessions and keeps live ones", async () => {
    const expired = await signIn(context, "ada@example.com");
    context.clock.advance(DAY - HOUR);
    const live = await signIn(context, "ada@example.com");
    const signedOut = await signIn(context, "grace@example.com");
    expect((await post("/api/v1/auth/logout", signedOut.headers)).status).toBe(204);
    context.clock.advance(2 * HOUR);

    expect(await context.store.deleteDeadSessions(context.clock.now())).toBe(2);
    const rows = await queryRows<{ id: string }>(context.store, "SELECT id FROM sessions");
    expect(rows.map((row) => row.id)).toEqual([live.token.split(".")[0]!]);
    expect((await me(live.headers)).status).toBe(200);
    for (const gone of [expired, signedOut]) expect((await me(gone.headers)).status).toBe(401);
    expect(await context.store.deleteDeadSessions(context.clock.now())).toBe(0);
  });

  test("only the SHA-256 of the session secret is stored, and no token appears in the log", async () => {
    const response = await devLogin("ada@example.com");
    const token = cookieOf(response).cookie.slice("session=".length);
    const refreshed = await post("/api/v1/auth/refresh", cookieOf(response));
    const second = cookieOf(refreshed).cookie.slice("session=".length);
    const stored = await storedText(context);
    context.services.logger.flush();
    const log = context.logs.join("");
    for (const value of [token, second]) {
      const secret = value.split(".")[1]!;
      expect(secret.length).toBeGreaterThanOrEqual(32); // 20+ random bytes, base32
      expect(stored).not.toContain(secret);
      expect(log).not.toContain(secret);
    }
  });
});
