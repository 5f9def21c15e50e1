// OIDC sign-in over a real port, in production mode, against a real OpenID provider on loopback:
// an ID token exchanged at POST /auth/oidc, and the browser's authorization-code flow with PKCE.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CLIENT_ID, CLIENT_SECRET, startTestOpenIDProvider, type TestOpenIDProvider } from "../auth/oidc-provider";
import { freePort } from "../browser/harness";
import { expectProblem, postJSON, type Service, sessionCookieOf, startService } from "./harness";

const CALLBACK = "/api/v1/auth/oidc/callback";
let provider: TestOpenIDProvider;
let service: Service;

beforeAll(async () => {
  const port = await freePort();
  provider = await startTestOpenIDProvider(
    { ada: { email: "ada@example.com", name: "Ada Lovelace" }, grace: { email: "grace@example.com", name: "Grace Hopper" } },
    { redirectURIs: [`http://127.0.0.1:${port}${CALLBACK}`] },
  );
  // The identity provider runs on loopback: allowed explicitly, as an operator allows an on-premises one.
  service = await startService({
    port,
    env: { OIDC_ISSUER: provider.issuer, OIDC_CLIENT_ID: CLIENT_ID, OIDC_CLIENT_SECRET: CLIENT_SECRET, OUTBOUND_ALLOWED_NETWORKS: "127.0.0.1/32" },
  });
});

afterAll(async () => {
  await service?.stop();
  await provider?.close();
});

describe("OIDC sign-in in production mode", () => {
  test("an ID token of the issuer opens a secure session that /auth/me reads", async () => {
    const signedIn = await postJSON(service, "/api/v1/auth/oidc", { idToken: await provider.idTokenFor("ada") }, { origin: service.publicURL });
    expect(signedIn.status).toBe(200);
    const setCookie = signedIn.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/^session=ses_[0-9a-z]+\.[0-9a-z]{40,}; /);
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("Secure");
    const { user } = (await signedIn.json()) as { user: { organization: { name: string } } };
    expect(user).toMatchObject({ email: "ada@example.com", name: "Ada Lovelace", role: "owner", organization: { name: "Ada Lovelace" } });

    const current = await service.request("/api/v1/auth/me", { headers: { cookie: sessionCookieOf(signedIn) } });
    expect(current.status).toBe(200);
    expect(await current.json()).toEqual(user);
  });

  test("the browser sign-in goes to the issuer with PKCE and comes back signed in, on the page it started from", async () => {
    const started = await service.request("/api/v1/auth/oidc/start?next=/dashboard/billing");
    expect(started.status).toBe(302);
    const authorization = new URL(started.headers.get("location")!);
    expect(authorization.origin).toBe(provider.issuer);
    expect(authorization.searchParams.get("code_challenge_method")).toBe("S256");
    expect(authorization.searchParams.get("redirect_uri")).toBe(`${service.publicURL}${CALLBACK}`);
    const pending = started.headers
      .getSetCookie()
      .find((line) => line.includes(`Path=${CALLBACK}`))!
      .split(";")[0]!;

    const callback = await provider.authorize(authorization.href, "grace", `${service.publicURL}${CALLBACK}`);
    const finished = await service.request(`${callback.pathname}${callback.search}`, { headers: { cookie: pending } });
    expect(finished.status).toBe(303);
    expect(finished.headers.get("location")).toBe("/dashboard/billing");
    const current = await service.request("/api/v1/auth/me", { headers: { cookie: sessionCookieOf(finished) } });
    expect(current.status).toBe(200);
    expect(await current.json()).toMatchObject({ email: "grace@example.com", name: "Grace Hopper", role: "owner" });
  });

  test("a forged ID token is 401, and the development sign-in does not exist in production", async () => {
    const genuine = await provider.idTokenFor("ada");
    const [header, payload] = genuine.split(".");
    await expectProblem(service, await postJSON(service, "/api/v1/auth/oidc", { idToken: `${header}.${payload}.${"A".repeat(342)}` }), 401, "unauthorized");
    await expectProblem(service, await postJSON(service, "/api/v1/auth/dev-login", { email: "dev@example.com" }), 404, "not-found");
  });
});
