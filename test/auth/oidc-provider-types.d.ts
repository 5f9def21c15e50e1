// The few parts of oidc-provider the test provider uses (the package ships no types).
declare module "oidc-provider" {
  import type { IncomingMessage, ServerResponse } from "node:http";

  interface Account {
    accountId: string;
    claims(): Promise<Record<string, unknown>>;
  }

  export interface Configuration {
    clients?: Array<Record<string, unknown>>;
    jwks?: { keys: unknown[] };
    cookies?: { keys: string[] };
    ttl?: Record<string, unknown>;
    claims?: Record<string, string[]>;
    conformIdTokenClaims?: boolean;
    pkce?: { required?(context: unknown, client: unknown): boolean };
    findAccount?(context: unknown, id: string): Promise<Account | undefined>;
  }

  export default class Provider {
    constructor(issuer: string, configuration?: Configuration);
    callback(): (request: IncomingMessage, response: ServerResponse) => void;
  }
}
