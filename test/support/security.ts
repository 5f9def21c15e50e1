// The security cases every authenticated endpoint shares (docs/api.md, "Which credential each
// endpoint takes"), written once: call securityTests inside the endpoint's describe(). The cases
// "another organization" are the endpoint's own, beside it.
import { describe, expect, test } from "bun:test";
import { SYSTEM_USER_ID } from "../../src/db/store";
import type { FeedTokenScope } from "../../src/db/feeds/records";
import { createFeedToken } from "../../src/modules/feeds/tokens";
import { createApiKey } from "../../src/modules/keys/service";
import { createOrganization, json, queryRows, signIn, tableNames, type TestContext } from "./context";

export interface SecuredEndpoint {
  method: "GET" | "POST" | "PATCH" | "DELETE";
  /** Called inside each test, after the fixture exists (paths may name fixture ids). */
  path: () => string;
  body?: () => unknown;
  /**
   * The credentials the endpoint takes: a session cookie, either a session or an API key, an API
   * key, or the operator's feed token of `feedTokenScope`.
   */
  accepts: "session" | "sessionOrKey" | "key" | "feedToken";
  /** For `accepts: "feedToken"`: the scope the endpoint's token must have (a token of the other scope gets 403). */
  feedTokenScope?: FeedTokenScope;
}

const PUBLIC_ORIGIN = "http://localhost:8080";
const UNSAFE = new Set(["POST", "PUT", "PATCH", "DELETE"]);

function send(context: TestContext, endpoint: SecuredEndpoint, headers: Record<string, string>): Promise<Response> {
  const body = endpoint.body?.();
  return context.request(endpoint.path(), {
    method: endpoint.method,
    headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function expectUnauthorized(response: Response): Promise<void> {
  expect(response.status).toBe(401);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  const body = await json(response);
  expect(body).toMatchObject({ title: "Unauthorized", status: 401 });
  expect(body.type).toEndWith("/problems/unauthorized");
}

/** An ACTIVE API key of a new organization, as its Authorization header. */
async function apiKeyOfNewOrganization(context: TestContext): Promise<{ authorization: string; organizationId: string; keyId: string }> {
  const organization = await createOrganization(context, 10, "Security Org");
  return { ...organization.auth, organizationId: organization.organizationId, keyId: organization.keyId };
}

/**
 * No credential, wrong, expired or ended credentials, the credential the endpoint refuses, and
 * cross-site browser requests (for the unsafe methods of an endpoint that takes a session).
 */
export function securityTests(endpoint: SecuredEndpoint, currentContext: () => TestContext): void {
  describe("security", () => {
    test("without any credential it answers 401 unauthorized", async () => {
      await expectUnauthorized(await send(currentContext(), endpoint, {}));
    });

    if (endpoint.accepts === "feedToken") return feedTokenSecurityTests(endpoint, currentContext);
    if (endpoint.accepts !== "session") apiKeySecurityTests(endpoint, currentContext);
    if (endpoint.accepts !== "key") sessionSecurityTests(endpoint, currentContext);
    if (endpoint.accepts === "key") {
      test("with a valid session cookie instead of an API key it answers 401 unauthorized", async () => {
        const context = currentContext();
        await expectUnauthorized(await send(context, endpoint, (await signIn(context, "cookie-instead@example.com")).headers));
      });
    }
  });
}

function apiKeySecurityTests(endpoint: SecuredEndpoint, currentContext: () => TestContext): void {
  test("with a malformed API key it answers 401 with WWW-Authenticate: Bearer", async () => {
    const response = await send(currentContext(), endpoint, { authorization: "Bearer pps_not-a-key" });
    expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
    await expectUnauthorized(response);
  });

  test("with a revoked API key it answers 401, even with a valid session cookie beside it", async () => {
    const context = currentContext();
    const key = await apiKeyOfNewOrganization(context);
    await context.store.revokeApiKey(key.organizationId, key.keyId);
    const session = await signIn(context, "revoked-key-holder@example.com");
    await expectUnauthorized(await send(context, endpoint, { authorization: key.authorization, ...(endpoint.accepts === "key" ? {} : session.headers) }));
  });
}

function sessionSecurityTests(endpoint: SecuredEndpoint, currentContext: () => TestContext): void {
  test("with a session token nobody issued it answers 401 unauthorized", async () => {
    await expectUnauthorized(
      await send(currentContext(), endpoint, { cookie: "session=ses_0000000000000nosuchsession.aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" }),
    );
    await expectUnauthorized(await send(currentContext(), endpoint, { cookie: "session=garbage" }));
  });

  test("with a real session id but a wrong secret it answers 401 unauthorized", async () => {
    const session = await signIn(currentContext(), "wrong-secret@example.com");
    const [id] = session.token.split(".");
    await expectUnauthorized(await send(currentContext(), endpoint, { cookie: `session=${id}.${"b".repeat(52)}` }));
  });

  if (endpoint.accepts === "session") {
    test("with an API key of the user's own organization instead of a session it answers 401 unauthorized", async () => {
      const context = currentContext();
      const session = await signIn(context, "key-holder@example.com");
      await context.store.ensureSystemUser(context.clock.now());
      const created = await createApiKey(context.store, {
        organizationId: session.organizationId,
        name: "k",
        createdBy: SYSTEM_USER_ID,
        keyPrefix: context.services.config.keyPrefix,
        now: context.clock.now(),
      });
      await expectUnauthorized(await send(context, endpoint, { authorization: `Bearer ${created.clearKey}` }));
    });
  }

  test("with a session that expired after 24 h it answers 401 unauthorized", async () => {
    const context = currentContext();
    const session = await signIn(context, "expired@example.com");
    context.clock.advance(24 * 3_600_000);
    await expectUnauthorized(await send(context, endpoint, session.headers));
  });

  test("with a session that was signed out it answers 401 unauthorized", async () => {
    const context = currentContext();
    const session = await signIn(context, "signed-out@example.com");
    await context.store.revokeSession(session.token.split(".")[0]!, context.clock.now());
    await expectUnauthorized(await send(context, endpoint, session.headers));
  });

  if (!UNSAFE.has(endpoint.method)) return;
  test("with a valid cookie but an Origin other than PUBLIC_URL it answers 403 forbidden", async () => {
    const context = currentContext();
    const session = await signIn(context, "csrf@example.com");
    const response = await send(context, endpoint, { ...session.headers, origin: "https://evil.example.com" });
    expect(response.status).toBe(403);
    expect((await json(response)).type).toEndWith("/forbidden");
  });

  test("with a valid cookie and Sec-Fetch-Site: cross-site it answers 403 forbidden", async () => {
    const context = currentContext();
    const session = await signIn(context, "csrf-fetch-site@example.com");
    const response = await send(context, endpoint, { ...session.headers, "sec-fetch-site": "cross-site", origin: PUBLIC_ORIGIN });
    expect(response.status).toBe(403);
  });
}

function feedTokenSecurityTests(endpoint: SecuredEndpoint, currentContext: () => TestContext): void {
  const scope = endpoint.feedTokenScope;
  if (scope === undefined) throw new Error(`${endpoint.method} ${endpoint.path()}: a feed-token endpoint names the scope it takes (feedTokenScope)`);
  const feedToken = async (context: TestContext, tokenScope: FeedTokenScope) =>
    createFeedToken(context.store, { scope: tokenScope, sourceId: null, name: `security ${tokenScope}`, now: context.clock.now() });

  test("with a malformed feed token it answers 401 with WWW-Authenticate: Bearer", async () => {
    const response = await send(currentContext(), endpoint, { authorization: "Bearer ftk_not-a-token" });
    expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
    await expectUnauthorized(response);
  });

  test("with a customer API key or a session cookie instead of a feed token it answers 401 unauthorized", async () => {
    const context = currentContext();
    const key = await apiKeyOfNewOrganization(context);
    await expectUnauthorized(await send(context, endpoint, { authorization: key.authorization }));
    await expectUnauthorized(await send(context, endpoint, (await signIn(context, "feed-cookie@example.com")).headers));
  });

  test("with a revoked feed token of the right scope it answers 401 unauthorized", async () => {
    const context = currentContext();
    const created = await feedToken(context, scope);
    await context.store.revokeFeedToken(created.token.id, context.clock.now());
    await expectUnauthorized(await send(context, endpoint, { authorization: `Bearer ${created.clearToken}` }));
  });

  test("with a feed token of the other scope it answers 403 forbidden", async () => {
    const context = currentContext();
    const created = await feedToken(context, scope === "push" ? "read" : "push");
    const response = await send(context, endpoint, { authorization: `Bearer ${created.clearToken}` });
    expect(response.status).toBe(403);
    expect((await json(response)).type).toEndWith("/forbidden");
  });
}

/** Every text value stored anywhere in the database, to prove a secret is not among them. */
export async function storedText(context: TestContext): Promise<string> {
  const dumps: string[] = [];
  for (const name of await tableNames(context.store)) dumps.push(JSON.stringify(await queryRows(context.store, `SELECT * FROM "${name}"`)));
  return dumps.join("\n");
}
