import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { SignJWT } from "jose";
import { createOIDCVerifier } from "../../src/modules/auth/oidc";
import { createTestContext, json, type TestContext } from "../support/context";
import { newSigningKey, startJWKSServer, type JWKSServer } from "./jwks-server";

const CLIENT_ID = "price-dashboard";

let context: TestContext;
let idp: JWKSServer;
let nowSeconds: number;

beforeEach(async () => {
  let clockNow = () => Date.now();
  idp = await startJWKSServer({ clientId: CLIENT_ID, now: () => clockNow() });
  context = await createTestContext({ OIDC_ISSUER: idp.issuer, OIDC_CLIENT_ID: CLIENT_ID });
  clockNow = () => context.clock.now();
  nowSeconds = Math.floor(context.clock.now() / 1000);
});

afterEach(async () => {
  idp.close();
  await context.close();
});

function exchange(idToken: string, headers: Record<string, string> = {}) {
  return context.request("/api/v1/auth/oidc", {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ idToken }),
  });
}

async function expectRefused(idToken: string): Promise<void> {
  const response = await exchange(idToken);
  expect(response.status).toBe(401);
  expect(response.headers.get("content-type")).toBe("application/problem+json");
  expect(response.headers.get("set-cookie")).toBeNull();
  const body = await json(response);
  expect(body.type).toEndWith("/unauthorized");
  expect(body.detail).toBe("The ID token is invalid, expired or not meant for this service.");
}

function base64url(value: unknown): string {
  return Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");
}

describe("POST /api/v1/auth/oidc", () => {
  describe("with a valid ID token", () => {
    test("it answers 200 with the user and a session cookie", async () => {
      const response = await exchange(await idp.sign({}));
      expect(response.status).toBe(200);
      expect(response.headers.get("set-cookie")).toStartWith("session=ses_");
      expect((await json(response)).user).toMatchObject({ email: "ada@example.com", name: "Ada Lovelace", role: "owner" });
    });

    test("a token that expired within the 30 s clock skew is still accepted", async () => {
      expect((await exchange(await idp.sign({ iat: nowSeconds - 100, exp: nowSeconds - 10 }))).status).toBe(200);
    });

    test("several audiences are accepted when azp names this client", async () => {
      expect((await exchange(await idp.sign({ aud: [CLIENT_ID, "other-api"], azp: CLIENT_ID }))).status).toBe(200);
    });

    test("the user's name falls back to preferred_username, then to the email's local part", async () => {
      const named = await json(await exchange(await idp.sign({ sub: "s-2", email: "bob@example.com", name: undefined, preferred_username: "bobby" })));
      expect(named.user.name).toBe("bobby");
      const bare = await json(await exchange(await idp.sign({ sub: "s-3", email: "carol@example.com", name: undefined })));
      expect(bare.user.name).toBe("carol");
    });
  });

  describe("with a bad ID token", () => {
    test("an expired token is refused", async () => {
      await expectRefused(await idp.sign({ iat: nowSeconds - 400, exp: nowSeconds - 60 }));
    });

    test("a token for another audience is refused", async () => {
      await expectRefused(await idp.sign({ aud: "someone-else" }));
    });

    test("a token with several audiences and no azp for this client is refused", async () => {
      await expectRefused(await idp.sign({ aud: [CLIENT_ID, "other-api"] }));
    });

    test("a token from another issuer is refused", async () => {
      await expectRefused(await idp.sign({ iss: "https://evil.example.com" }));
    });

    test("a token signed by a key the issuer does not publish is refused", async () => {
      await expectRefused(await idp.sign({}, { key: await newSigningKey("rogue-key") }));
    });

    test("a token signed by an unpublished key that claims a published kid is refused", async () => {
      await expectRefused(await idp.sign({}, { key: await newSigningKey("key-1") }));
    });

    test("an unsigned token (alg none) is refused, even though the discovery document lists none", async () => {
      const header = base64url({ alg: "none", typ: "JWT" });
      const payload = base64url({ iss: idp.issuer, aud: CLIENT_ID, sub: "subject-1", email: "ada@example.com", iat: nowSeconds, exp: nowSeconds + 300 });
      await expectRefused(`${header}.${payload}.`);
    });

    test("an HS256 token keyed with the provider's public key is refused", async () => {
      const publicJWK = idp.published[0]!.publicJWK;
      const header = base64url({ alg: "HS256", typ: "JWT", kid: "key-1" });
      const payload = base64url({ iss: idp.issuer, aud: CLIENT_ID, sub: "subject-1", email: "ada@example.com", iat: nowSeconds, exp: nowSeconds + 300 });
      const hmacKey = await crypto.subtle.importKey("raw", new TextEncoder().encode(JSON.stringify(publicJWK)), { name: "HMAC", hash: "SHA-256" }, false, [
        "sign",
      ]);
      const signature = Buffer.from(await crypto.subtle.sign("HMAC", hmacKey, new TextEncoder().encode(`${header}.${payload}`))).toString("base64url");
      await expectRefused(`${header}.${payload}.${signature}`);
    });

    test("a token whose payload was altered after signing is refused", async () => {
      const [header, payload, signature] = (await idp.sign({})).split(".") as [string, string, string];
      const claims = JSON.parse(Buffer.from(payload, "base64url").toString());
      await expectRefused(`${header}.${base64url({ ...claims, email: "admin@example.com" })}.${signature}`);
    });

    test("a token not valid before a time beyond the clock skew is refused", async () => {
      await expectRefused(await idp.sign({ nbf: nowSeconds + 120 }));
    });

    test("a token issued in the future, beyond the clock skew, is refused", async () => {
      await expectRefused(await idp.sign({ iat: nowSeconds + 120, exp: nowSeconds + 600 }));
    });

    test("a token issued more than 10 minutes ago is refused even before it expires", async () => {
      await expectRefused(await idp.sign({ iat: nowSeconds - 700, exp: nowSeconds + 3000 }));
    });

    for (const [claim, value] of [
      ["sub", 42],
      ["sub", ["subject-1"]],
      ["email", { address: "ada@example.com" }],
      ["name", ["Ada"]],
      ["preferred_username", 7],
      ["email_verified", 1],
      ["email_verified", { verified: true }],
    ] as const) {
      test(`a token whose ${claim} is ${JSON.stringify(value)} is refused, never coerced`, async () => {
        await expectRefused(await idp.sign({ [claim]: value }));
      });
    }

    test("in the code flow, a nonce claim that is an array holding the expected nonce is refused", async () => {
      const verifier = createOIDCVerifier({
        issuer: idp.issuer,
        clientId: CLIENT_ID,
        clock: context.clock,
        logger: context.services.logger,
        outbound: context.services.outbound,
      });
      expect(await verifier.verifyIDToken(await idp.sign({ nonce: "nonce-1" }), { nonce: "nonce-1" })).toMatchObject({ emailVerified: true });
      await expect(verifier.verifyIDToken(await idp.sign({ nonce: ["nonce-1"] }), { nonce: "nonce-1" })).rejects.toMatchObject({ slug: "unauthorized" });
    });

    test("a token whose iat is a string is refused, never coerced", async () => {
      const key = idp.published[0]!;
      const claimsWithStringIat: Record<string, unknown> = { sub: "subject-1", email: "ada@example.com", email_verified: true, iat: String(nowSeconds) };
      const token = await new SignJWT(claimsWithStringIat)
        .setProtectedHeader({ alg: "RS256", kid: key.kid, typ: "JWT" })
        .setIssuer(idp.issuer)
        .setAudience(CLIENT_ID)
        .setExpirationTime(nowSeconds + 300)
        .sign(key.privateKey);
      await expectRefused(token);
    });

    test("a value that is not a JWT at all is refused", async () => {
      await expectRefused("not-a-jwt");
    });

    test("a missing or empty idToken is 422 unprocessable-body", async () => {
      for (const body of ["{}", JSON.stringify({ idToken: "" })]) {
        const response = await context.request("/api/v1/auth/oidc", { method: "POST", headers: { "content-type": "application/json" }, body });
        expect(response.status).toBe(422);
        expect((await json(response)).type).toEndWith("/unprocessable-body");
      }
    });

    test("no refused token appears in the log, only the reason", async () => {
      const expired = await idp.sign({ iat: nowSeconds - 400, exp: nowSeconds - 60 });
      await exchange(expired);
      context.services.logger.flush();
      const log = context.logs.join("");
      expect(log).toContain('"reason":"ERR_JWT_EXPIRED"');
      for (const part of expired.split(".")) expect(log).not.toContain(part);
    });
  });

  describe("with a valid token the service cannot use", () => {
    test("a token without an email is 403 forbidden", async () => {
      const response = await exchange(await idp.sign({ email: undefined }));
      expect(response.status).toBe(403);
      expect((await json(response)).detail).toContain("email");
    });

    test("a token whose email the provider has not verified is 403 forbidden", async () => {
      const response = await exchange(await idp.sign({ email_verified: false }));
      expect(response.status).toBe(403);
      expect((await json(response)).detail).toBe(
        "The identity provider has not confirmed this email address as verified (its ID token must carry email_verified: true).",
      );
    });

    test("another subject with an email that is already taken is 409 conflict", async () => {
      expect((await exchange(await idp.sign({ sub: "first" }))).status).toBe(200);
      const response = await exchange(await idp.sign({ sub: "second" }));
      expect(response.status).toBe(409);
      expect((await json(response)).type).toEndWith("/conflict");
    });
  });

  describe("cross-site protection", () => {
    test("a sign-in posted from another origin is 403 forbidden (login CSRF)", async () => {
      const response = await exchange(await idp.sign({}), { origin: "https://evil.example.com" });
      expect(response.status).toBe(403);
      expect((await json(response)).type).toEndWith("/forbidden");
      expect(response.headers.get("set-cookie")).toBeNull();
    });

    test("a sign-in with Sec-Fetch-Site: cross-site is 403 forbidden", async () => {
      expect((await exchange(await idp.sign({}), { "sec-fetch-site": "cross-site" })).status).toBe(403);
    });
  });

  describe("when the identity provider misbehaves", () => {
    test("an unreachable provider is 503 unavailable, and sign-in works again once it is back", async () => {
      idp.failing = true;
      const response = await exchange(await idp.sign({}));
      expect(response.status).toBe(503);
      expect((await json(response)).type).toEndWith("/unavailable");
      idp.failing = false;
      expect((await exchange(await idp.sign({}))).status).toBe(200);
    });

    test("in production its requests go through the outbound policy: a jwks_uri on an address it refuses is 503 unavailable, and never asked", async () => {
      let asked = 0;
      const internal = Bun.serve({
        hostname: "127.0.0.2",
        port: 0,
        fetch: () => (asked++, Response.json({ keys: idp.published.map((key) => key.publicJWK) })),
      });
      try {
        await context.close();
        // The provider itself is on loopback, which the operator allows; 127.0.0.2 stands for an internal host.
        context = await createTestContext({
          PRICE_ENV: "production",
          OIDC_ISSUER: idp.issuer,
          OIDC_CLIENT_ID: CLIENT_ID,
          OUTBOUND_ALLOWED_NETWORKS: "127.0.0.1/32",
        });
        idp.advertisedJWKSURI = `http://127.0.0.2:${internal.port}/jwks`;
        const response = await exchange(await idp.sign({}));
        expect(response.status).toBe(503);
        expect((await json(response)).type).toEndWith("/unavailable");
        expect(asked).toBe(0);
      } finally {
        internal.stop(true);
      }
    });

    test("a discovery document that names another issuer is 503 unavailable", async () => {
      idp.advertisedIssuer = "https://evil.example.com";
      const response = await exchange(await idp.sign({}));
      expect(response.status).toBe(503);
      expect((await json(response)).type).toEndWith("/unavailable");
    });
  });
});

describe("the OIDC verifier's key cache", () => {
  test("the JWKS is fetched once and reused across sign-ins", async () => {
    for (let index = 0; index < 3; index++) expect((await exchange(await idp.sign({}))).status).toBe(200);
    expect(idp.jwksFetches).toBe(1);
  });

  test("when the provider rotates its signing key, a token with the new kid makes the verifier fetch the JWKS again", async () => {
    const verifier = createOIDCVerifier({
      issuer: idp.issuer,
      clientId: CLIENT_ID,
      clock: context.clock,
      logger: context.services.logger,
      outbound: context.services.outbound,
      jwksCooldownMs: 0,
    });
    await verifier.verifyIDToken(await idp.sign({}));
    expect(idp.jwksFetches).toBe(1);
    const next = await newSigningKey("key-2", "ES256");
    idp.published = [next];
    const identity = await verifier.verifyIDToken(await idp.sign({}, { key: next }));
    expect(identity).toEqual({ subject: `${idp.issuer}#subject-1`, email: "ada@example.com", emailVerified: true, name: "Ada Lovelace" });
    expect(idp.jwksFetches).toBe(2);
  });

  test("within the cool-down, an unknown kid does not make the verifier fetch the JWKS again", async () => {
    expect((await exchange(await idp.sign({}))).status).toBe(200);
    await expectRefused(await idp.sign({}, { key: await newSigningKey("key-3") }));
    expect(idp.jwksFetches).toBe(1);
  });
});
