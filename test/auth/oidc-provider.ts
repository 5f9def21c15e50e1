// A real OpenID provider (panva's oidc-provider, the certified reference implementation) on
// loopback, with its state in memory, and a client that drives its authorization-code flow the way
// a browser would, to obtain genuine ID tokens.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair } from "jose";
import Provider from "oidc-provider";

export const CLIENT_ID = "price-dashboard";
export const CLIENT_SECRET = "dashboard-client-secret-for-tests-only";
const REDIRECT_URI = "http://127.0.0.1/callback";

export interface TestAccount {
  email: string;
  name?: string;
  emailVerified?: boolean;
  /** Claims set as given, overriding the ones above (`undefined` leaves a claim out), to send what odd providers send. */
  claims?: Record<string, unknown>;
}

export interface TestOpenIDProviderOptions {
  /** More redirect URIs for the client, such as a test server's /api/v1/auth/oidc/callback. */
  redirectURIs?: string[];
  /** Refuse authorization requests without a PKCE S256 code challenge (the default asks it of public clients only). */
  requirePKCE?: boolean;
}

export interface TestOpenIDProvider {
  issuer: string;
  /** Signs `accountId` in through /auth, the login and consent interactions and /token; returns the ID token. */
  idTokenFor(accountId: string): Promise<string>;
  /**
   * Drives an authorization request the way a browser would (login as `accountId`, consent) until
   * the provider redirects to a URL starting with `redirectURI`; returns that URL (with code and state).
   */
  authorize(authorizationURL: string, accountId: string, redirectURI: string): Promise<URL>;
  close(): Promise<void>;
}

const TTL_SECONDS = { AccessToken: 600, AuthorizationCode: 60, Grant: 600, IdToken: 600, Interaction: 600, Session: 600 };

export async function startTestOpenIDProvider(accounts: Record<string, TestAccount>, options: TestOpenIDProviderOptions = {}): Promise<TestOpenIDProvider> {
  const { privateKey } = await generateKeyPair("RS256", { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: "test-rs256", alg: "RS256", use: "sig" };
  const server: Server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: CLIENT_ID,
        client_secret: CLIENT_SECRET,
        redirect_uris: [REDIRECT_URI, ...(options.redirectURIs ?? [])],
        response_types: ["code"],
        grant_types: ["authorization_code"],
      },
    ],
    ...(options.requirePKCE ? { pkce: { required: () => true } } : {}),
    jwks: { keys: [signingKey as never] },
    cookies: { keys: ["test-provider-cookie-key"] },
    ttl: Object.fromEntries(Object.entries(TTL_SECONDS).map(([name, seconds]) => [name, () => seconds])) as never,
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"] },
    // Put the email and name claims in the ID token itself, as a dashboard sign-in needs them there.
    conformIdTokenClaims: false,
    async findAccount(_context, id) {
      const account = accounts[id];
      if (account === undefined) return undefined;
      return {
        accountId: id,
        async claims() {
          return {
            sub: id,
            email: account.email,
            email_verified: account.emailVerified ?? true,
            ...(account.name ? { name: account.name } : {}),
            ...account.claims,
          };
        },
      };
    },
  });
  // oidc-provider prints notices and deprecation warnings on its first requests; they are not ours.
  server.on("request", provider.callback());

  async function authorize(authorizationURL: string, accountId: string, redirectURI: string): Promise<URL> {
    const jar = new Map<string, string>();
    const visit = async (url: string, init: RequestInit = {}): Promise<Response> => {
      const cookie = [...jar].map(([name, value]) => `${name}=${value}`).join("; ");
      const response = await fetch(url, { ...init, redirect: "manual", headers: { ...(init.headers as Record<string, string>), cookie } });
      for (const line of response.headers.getSetCookie()) {
        const pair = line.split(";")[0]!;
        jar.set(pair.slice(0, pair.indexOf("=")), pair.slice(pair.indexOf("=") + 1));
      }
      return response;
    };
    let response = await visit(authorizationURL);
    for (let step = 0; step < 10; step++) {
      const location = response.headers.get("location");
      if (location === null) throw new Error(`the provider answered ${response.status} without a redirect: ${await response.text()}`);
      const next = new URL(location, issuer);
      if (next.href.startsWith(redirectURI)) return next;
      if (next.pathname.startsWith("/interaction/")) {
        const page = await (await visit(next.href)).text();
        const form: Record<string, string> = page.includes('name="login"') ? { prompt: "login", login: accountId, password: "any" } : { prompt: "consent" };
        response = await visit(next.href, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(form),
        });
      } else {
        response = await visit(next.href);
      }
    }
    throw new Error("the sign-in did not reach the callback");
  }

  async function idTokenFor(accountId: string): Promise<string> {
    const query = new URLSearchParams({
      client_id: CLIENT_ID,
      response_type: "code",
      scope: "openid email profile",
      redirect_uri: REDIRECT_URI,
      state: "state-1",
      nonce: "nonce-1",
    });
    const callback = await authorize(`${issuer}/auth?${query}`, accountId, REDIRECT_URI);
    const code = callback.searchParams.get("code");
    if (code === null) throw new Error(`no code in the callback: ${callback.search}`);
    const token = await fetch(`${issuer}/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: `Basic ${btoa(`${CLIENT_ID}:${CLIENT_SECRET}`)}` },
      body: new URLSearchParams({ grant_type: "authorization_code", code, redirect_uri: REDIRECT_URI }),
    });
    const body = (await token.json()) as { id_token?: string };
    if (body.id_token === undefined) throw new Error(`no id_token from /token: ${JSON.stringify(body)}`);
    return body.id_token;
  }

  return {
    issuer,
    idTokenFor,
    authorize,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
