// Sessions over a real port: the development sign-in, /auth/me, refresh and logout.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { expectProblem, feedLine, postJSON, type Service, sessionCookieOf, startService } from "./harness";

const DAY_SECONDS = 24 * 3600;
let service: Service;

beforeAll(async () => {
  service = await startService({
    env: { PRICE_ENV: "development", TRIAL_CREDITS: "7" },
    // Any product keeps development mode from loading its demo data into the empty database.
    prepare: async (cli) => void (await cli(["import", "-"], { stdin: feedLine("4006381333931", null) })),
  });
});

afterAll(async () => {
  await service?.stop();
});

function me(cookie: string): Promise<Response> {
  return service.request("/api/v1/auth/me", { headers: { cookie } });
}

describe("sessions through the development sign-in", () => {
  test("a developer signs in with an email, reads /auth/me, refreshes the session and signs out", async () => {
    const origin = { origin: service.publicURL };
    const signedIn = await postJSON(service, "/api/v1/auth/dev-login", { email: "Dev@Example.com" }, origin);
    expect(signedIn.status).toBe(200);
    expect(signedIn.headers.get("cache-control")).toBe("no-store");
    const setCookie = signedIn.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/^session=ses_[0-9a-z]+\.[0-9a-z]{40,}; /);
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Lax");
    expect(setCookie).toContain(`Max-Age=${DAY_SECONDS}`);
    expect(setCookie).not.toContain("Secure"); // development mode on plain http
    const session = (await signedIn.json()) as { user: { id: string; organization: { id: string } }; expiresAt: string };
    expect(session.user).toMatchObject({ email: "dev@example.com", name: "dev", role: "owner" });
    expect(session.user.id).toStartWith("usr_");
    expect(session.user.organization.id).toStartWith("org_");
    expect(Math.abs(Date.parse(session.expiresAt) - (Date.now() + DAY_SECONDS * 1000))).toBeLessThan(60_000);
    let cookie = sessionCookieOf(signedIn);

    const current = await me(cookie);
    expect(current.status).toBe(200);
    expect(current.headers.get("cache-control")).toBe("no-store");
    expect(await current.json()).toEqual(session.user);

    // The session also reaches the billing API: the new organization got its trial credits.
    const balance = await service.request("/api/v1/customer/billing/balance", { headers: { cookie } });
    expect(balance.status).toBe(200);
    expect(await balance.json()).toMatchObject({ available: 7, reserved: 0, buckets: [{ source: "trial", granted: 7, remaining: 7, expiresAt: null }] });

    const refreshed = await postJSON(service, "/api/v1/auth/refresh", undefined, { cookie, ...origin });
    expect(refreshed.status).toBe(200);
    expect(((await refreshed.json()) as { user: unknown }).user).toEqual(session.user);
    const previous = cookie;
    cookie = sessionCookieOf(refreshed);
    expect(cookie).not.toBe(previous);
    await expectProblem(service, await me(previous), 401, "unauthorized");
    expect((await me(cookie)).status).toBe(200);

    const loggedOut = await postJSON(service, "/api/v1/auth/logout", undefined, { cookie, ...origin });
    expect(loggedOut.status).toBe(204);
    expect(loggedOut.headers.get("set-cookie")).toMatch(/^session=; Max-Age=0; /);
    await expectProblem(service, await me(cookie), 401, "unauthorized");
    await expectProblem(service, await service.request("/api/v1/customer/api-keys", { headers: { cookie } }), 401, "unauthorized");
  });

  test("a second sign-in of the same email finds the same user and organization", async () => {
    const first = (await (await postJSON(service, "/api/v1/auth/dev-login", { email: "same@example.com" })).json()) as { user: unknown };
    const second = (await (await postJSON(service, "/api/v1/auth/dev-login", { email: "same@example.com" })).json()) as { user: unknown };
    expect(second.user).toEqual(first.user);
  });

  test("a session request from another site is refused with 403, and no cookie at all is 401", async () => {
    const signedIn = await postJSON(service, "/api/v1/auth/dev-login", { email: "csrf@example.com" });
    const cookie = sessionCookieOf(signedIn);
    await expectProblem(service, await postJSON(service, "/api/v1/auth/refresh", undefined, { cookie, origin: "https://evil.example" }), 403, "forbidden");
    await expectProblem(service, await postJSON(service, "/api/v1/auth/logout", undefined, { cookie, "sec-fetch-site": "cross-site" }), 403, "forbidden");
    await expectProblem(service, await service.request("/api/v1/auth/me"), 401, "unauthorized");
    await expectProblem(service, await postJSON(service, "/api/v1/auth/refresh", undefined), 401, "unauthorized");
    // The session survived the refused requests.
    expect((await me(cookie)).status).toBe(200);
  });

  test("a malformed sign-in body is 422 naming the field, and broken JSON is 400", async () => {
    const invalid = await expectProblem(service, await postJSON(service, "/api/v1/auth/dev-login", { email: 42 }), 422, "unprocessable-body");
    expect(invalid.detail).toContain("email");
    await expectProblem(
      service,
      await service.request("/api/v1/auth/dev-login", { method: "POST", headers: { "content-type": "application/json" }, body: "{" }),
      400,
      "invalid-body",
    );
  });
});
