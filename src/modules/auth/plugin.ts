import { Elysia } from "elysia";
import type { Services } from "../../services";
import { afterAuthentication } from "../../http/authentication-first";
import { Problem } from "../../http/problem";
import { authenticate, type Principal, SESSION_COOKIE } from "./guard";
import { readCookie } from "./session-cookie";

/**
 * `auth: "session"` or `auth: "sessionOrKey"` on a route resolves `principal` before the handler,
 * or answers 401 (403 for a cross-site cookie request). Authentication is the route's first step:
 * in the parse phase when the request has a body, else in the transform phase, so it comes before
 * the body is parsed and before any validation, and a stranger learns nothing from either. The
 * request's deferred problems (see authentication-first.ts) are thrown right after it.
 */
export function authPlugin(services: Services) {
  const { store, clock, config } = services;
  const principals = new WeakMap<Request, Principal>();
  const authenticateOnce = async (request: Request, accept: "session" | "sessionOrKey"): Promise<void> => {
    if (principals.has(request)) return;
    const principal = await authenticate(
      { request, sessionToken: readCookie(request, SESSION_COOKIE), store, clock, publicUrl: config.publicUrl, keyPrefix: config.keyPrefix },
      { session: true, apiKey: accept === "sessionOrKey" },
    );
    principals.set(request, principal);
    afterAuthentication(request);
  };
  return new Elysia({ name: "auth.guard" }).macro({
    auth: (accept: "session" | "sessionOrKey") => ({
      // Returns nothing, so Elysia's own parser reads the body next.
      async parse({ request }) {
        await authenticateOnce(request, accept);
      },
      async transform({ request }) {
        await authenticateOnce(request, accept);
      },
      resolve({ request }) {
        const principal = principals.get(request);
        if (principal === undefined) throw new Problem("unauthorized");
        return { principal };
      },
    }),
  });
}

/** Narrows the principal of an `auth: "session"` route, which is always a session. */
export function sessionPrincipal(principal: Principal): Extract<Principal, { kind: "session" }> {
  if (principal.kind !== "session") throw new Problem("unauthorized");
  return principal;
}
