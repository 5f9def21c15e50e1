import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { addProduct, createTestContext, json, type TestContext } from "../support/context";
import { CLIENT_ID, startTestOpenIDProvider, type TestOpenIDProvider } from "./oidc-provider";

const ORIGIN = "http://localhost:8080"; // PUBLIC_URL's origin in the test config
const FRESH = "04006381333931";
const DAY = 24 * 3_600_000;

let provider: TestOpenIDProvider;

beforeAll(async () => {
  provider = await startTestOpenIDProvider({
    ada: { email: "Ada@Example.com", name: "Ada Lovelace" },
    grace: { email: "grace@example.com", name: "Grace Hopper" },
  });
});

afterAll(async () => {
  await provider.close();
});

async function oidcContext(): Promise<TestContext> {
  const context = await createTestContext({ OIDC_ISSUER: provider.issuer, OIDC_CLIENT_ID: CLIENT_ID, TRIAL_CREDITS: "5" });
  // The provider signs with the real time; the service must judge its tokens by the same time.
  context.clock.set(Date.now());
  return context;
}

function cookieOf(response: Response): string {
  const line = response.headers.get("set-cookie") ?? "";
  return line.split(";")[0]!;
}

describe("sign-in with a real OpenID provider, then the key lifecycle", () => {
  test("a customer signs in, refreshes, creates, uses, rotates and revokes a key, and signs out, with no secret in any log line", async () => {
    const context = await oidcContext();
    const secrets: string[] = [];
    const post = (path: string, cookie: string, body?: unknown) =>
      context.request(path, {
        method: "POST",
        headers: { cookie, origin: ORIGIN, ...(body === undefined ? {} : { "content-type": "application/json" }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });

    // Sign in with a genuine ID token.
    const idToken = await provider.idTokenFor("ada");
    secrets.push(idToken);
    const signedIn = await context.request("/api/v1/auth/oidc", {
      method: "POST",
      headers: { "content-type": "application/json", origin: ORIGIN },
      body: JSON.stringify({ idToken }),
    });
    expect(signedIn.status).toBe(200);
    expect(signedIn.headers.get("cache-control")).toBe("no-store");
    const setCookie = signedIn.headers.get("set-cookie")!;
    expect(setCookie).toMatch(/^session=ses_[0-9a-z]+\.[0-9a-z]{40,}; /);
    expect(setCookie).toContain("HttpOnly");
    expect(setCookie).toContain("SameSite=Lax");
    expect(setCookie).toContain("Path=/");
    expect(setCookie).toContain(`Max-Age=${DAY / 1000}`);
    expect(setCookie).not.toContain("Secure"); // development mode on plain http
    let cookie = cookieOf(signedIn);
    secrets.push(cookie.slice("session=".length));
    const session = await json(signedIn);
    expect(session.expiresAt).toBe(new Date(context.clock.now() + DAY).toISOString());
    expect(session.user).toMatchObject({ email: "ada@example.com", name: "Ada Lovelace", role: "owner", organization: { name: "Ada Lovelace" } });
    const { id: userId, organization } = session.user;
    expect(userId).toStartWith("usr_");
    expect(organization.id).toStartWith("org_");

    // The new organization got its trial credits as a trial bucket and ledger row.
    const balance = await context.store.getBalance(organization.id, context.clock.now());
    expect(balance.available).toBe(5);
    expect(balance.buckets.map((bucket) => bucket.source)).toEqual(["trial"]);
    const ledger = (await context.store.listTransactions(organization.id, { limit: 10 })).items;
    expect(ledger.map((row) => [row.type, row.amount, row.balanceAfter])).toEqual([["trial", 5, 5]]);

    // /auth/me, and a second sign-in of the same person finds the same user and organization.
    const me = await context.request("/api/v1/auth/me", { headers: { cookie } });
    expect(me.status).toBe(200);
    expect(await json(me)).toEqual(session.user);
    const again = await context.request("/api/v1/auth/oidc", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ idToken: await provider.idTokenFor("ada") }),
    });
    expect((await json(again)).user).toEqual(session.user);
    expect((await context.store.listOrganizations()).length).toBe(1);

    // Refresh: a new token, the old one dead at once.
    context.clock.advance(60_000);
    const refreshed = await post("/api/v1/auth/refresh", cookie);
    expect(refreshed.status).toBe(200);
    expect((await json(refreshed)).expiresAt).toBe(new Date(context.clock.now() + DAY).toISOString());
    const oldCookie = cookie;
    cookie = cookieOf(refreshed);
    secrets.push(cookie.slice("session=".length));
    expect(cookie).not.toBe(oldCookie);
    expect((await context.request("/api/v1/auth/me", { headers: { cookie: oldCookie } })).status).toBe(401);
    expect((await context.request("/api/v1/auth/me", { headers: { cookie } })).status).toBe(200);

    // Create a key and use it on the data endpoint.
    const created = await post("/api/v1/customer/api-keys", cookie, { name: "  production  " });
    expect(created.status).toBe(201);
    const { key, clearKey } = await json(created);
    secrets.push(clearKey);
    expect(clearKey).toMatch(/^pps_[0-9A-Za-z]{38}$/);
    expect(key).toMatchObject({
      name: "production",
      status: "ACTIVE",
      keyPrefix: clearKey.slice(0, 8),
      lastUsedAt: null,
      replacedBy: null,
      createdBy: { id: userId, name: "Ada Lovelace", email: "ada@example.com" },
    });
    await addProduct(context, FRESH, [{ merchantId: "m-a", price: 1299, ageMs: 3_600_000 }]);
    const price = (bearer: string) => context.request(`/api/v1/products/${FRESH}/price`, { headers: { authorization: `Bearer ${bearer}` } });
    const priced = await price(clearKey);
    expect(priced.status).toBe(200);
    expect((await json(priced)).meta).toMatchObject({ reason: "fresh-offer", creditsConsumed: 1, creditsRemaining: 4 });
    await context.services.keyUsage.flush();
    const listed = await json(await context.request("/api/v1/customer/api-keys", { headers: { cookie } }));
    expect(listed.items).toHaveLength(1);
    expect(listed.items[0].lastUsedAt).toBe(new Date(context.clock.now()).toISOString());

    // Rotate: the old secret fails at once, the new one works.
    const rotated = await post(`/api/v1/customer/api-keys/${key.id}/rotate`, cookie);
    expect(rotated.status).toBe(200);
    const replacement = await json(rotated);
    secrets.push(replacement.clearKey);
    expect(replacement.key).toMatchObject({ name: "production", status: "ACTIVE" });
    expect(replacement.clearKey).not.toBe(clearKey);
    expect((await price(clearKey)).status).toBe(401);
    expect((await price(replacement.clearKey)).status).toBe(200);
    const afterRotation = await json(await context.request("/api/v1/customer/api-keys", { headers: { cookie } }));
    expect(afterRotation.items.map((item: any) => [item.id, item.status, item.replacedBy])).toEqual([
      [replacement.key.id, "ACTIVE", null],
      [key.id, "ROTATED", replacement.key.id],
    ]);

    // Revoke: 401 with it afterwards, and a second revoke is 409.
    const revoked = await post(`/api/v1/customer/api-keys/${replacement.key.id}/revoke`, cookie);
    expect(revoked.status).toBe(200);
    expect((await json(revoked)).status).toBe("REVOKED");
    const refused = await price(replacement.clearKey);
    expect(refused.status).toBe(401);
    expect((await json(refused)).detail).toBe("The API key is revoked.");
    const twice = await post(`/api/v1/customer/api-keys/${replacement.key.id}/revoke`, cookie);
    expect(twice.status).toBe(409);
    expect((await json(twice)).type).toEndWith("/invalid-key-state");

    // Sign out: 204, cookie cleared, session dead server-side.
    const loggedOut = await post("/api/v1/auth/logout", cookie);
    expect(loggedOut.status).toBe(204);
    expect(loggedOut.headers.get("set-cookie")).toMatch(/^session=; Max-Age=0; /);
    expect((await context.request("/api/v1/auth/me", { headers: { cookie } })).status).toBe(401);
    expect((await context.request("/api/v1/customer/api-keys", { headers: { cookie } })).status).toBe(401);

    context.services.logger.flush();
    const log = context.logs.join("");
    expect(log).toContain('"message":"signed in"');
    expect(log).toContain('"message":"api key rotated"');
    for (const secret of secrets) {
      expect(log).not.toContain(secret);
      expect(log).not.toContain(secret.slice(-20));
    }
    for (const part of idToken.split(".")) expect(log).not.toContain(part);
    await context.close();
  });

  test("an invited person signs in into the inviting organization, as a member, with no new trial credits", async () => {
    const context = await oidcContext();
    const signInWith = async (account: string) =>
      json(
        await context.request("/api/v1/auth/oidc", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ idToken: await provider.idTokenFor(account) }),
        }),
      );
    const ada = await signInWith("ada");
    await context.store.upsertInvitation({
      email: "grace@example.com",
      organizationId: ada.user.organization.id,
      role: "member",
      createdAt: context.clock.now(),
    });
    const grace = await signInWith("grace");
    expect(grace.user).toMatchObject({ email: "grace@example.com", name: "Grace Hopper", role: "member", organization: ada.user.organization });
    expect((await context.store.getBalance(ada.user.organization.id, context.clock.now())).available).toBe(5);
    expect((await context.store.listOrganizations()).length).toBe(1);
    await context.close();
  });
});
