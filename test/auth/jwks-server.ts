// A tiny identity provider on loopback for the negative tests: a discovery document and a JWKS we
// control, plus jose to sign (or mis-sign) tokens with the published keys or others.
import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from "jose";

export interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  publicJWK: Record<string, unknown>;
}

export async function newSigningKey(kid: string, alg: "RS256" | "ES256" = "RS256"): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { kid, privateKey, publicJWK: { ...(await exportJWK(publicKey)), kid, alg, use: "sig" } };
}

export interface JWKSServer {
  issuer: string;
  /** The keys the JWKS endpoint publishes; change it to rotate. */
  published: SigningKey[];
  /** How many times the JWKS endpoint was fetched. */
  jwksFetches: number;
  /** Make discovery or JWKS answer 500, to simulate an outage. */
  failing: boolean;
  /** The issuer the discovery document names, when it should lie. */
  advertisedIssuer: string | null;
  /** The jwks_uri the discovery document names, when it should point elsewhere. */
  advertisedJWKSURI: string | null;
  sign(claims: JWTPayload, options?: { key?: SigningKey; alg?: string; kid?: string }): Promise<string>;
  close(): void;
}

export async function startJWKSServer(options: { clientId: string; now: () => number }): Promise<JWKSServer> {
  const first = await newSigningKey("key-1");
  const state: JWKSServer = {
    issuer: "",
    published: [first],
    jwksFetches: 0,
    failing: false,
    advertisedIssuer: null,
    advertisedJWKSURI: null,
    async sign(claims, signOptions = {}) {
      const key = signOptions.key ?? state.published[0]!;
      const nowSeconds = Math.floor(options.now() / 1000);
      return new SignJWT({ sub: "subject-1", email: "ada@example.com", email_verified: true, name: "Ada Lovelace", ...claims })
        .setProtectedHeader({ alg: signOptions.alg ?? (key.publicJWK.alg as string), kid: signOptions.kid ?? key.kid, typ: "JWT" })
        .setIssuer((claims.iss as string | undefined) ?? state.issuer)
        .setAudience(claims.aud ?? options.clientId)
        .setIssuedAt((claims.iat as number | undefined) ?? nowSeconds)
        .setExpirationTime((claims.exp as number | undefined) ?? nowSeconds + 300)
        .sign(key.privateKey);
    },
    close: () => server.stop(true),
  };
  const server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(request) {
      const path = new URL(request.url).pathname;
      if (state.failing) return new Response("down", { status: 500 });
      if (path === "/.well-known/openid-configuration") {
        return Response.json({
          issuer: state.advertisedIssuer ?? state.issuer,
          jwks_uri: state.advertisedJWKSURI ?? `${state.issuer}/jwks`,
          id_token_signing_alg_values_supported: ["RS256", "ES256", "HS256", "none"],
        });
      }
      if (path === "/jwks") {
        state.jwksFetches++;
        return Response.json({ keys: state.published.map((key) => key.publicJWK) });
      }
      return new Response("not found", { status: 404 });
    },
  });
  state.issuer = `http://127.0.0.1:${server.port}`;
  return state;
}
