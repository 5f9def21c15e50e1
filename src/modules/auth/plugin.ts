import { Elysia } from "elysia";
import type { Services } from "../../services";
import { Problem } from "../../http/problem";
import { authenticate, type Principal, SESSION_COOKIE } from "./guard";
import { readCookie } from "./session-cookie";

/**
 * `auth: "session"` or `auth: "sessionOrKey"` on a route resolves `principal` before the handler,
 * or answers 401 (403 for a cross-site cookie request). Authentication runs in the transform phase,
 * before body and query validation, so a stranger learns nothing from validation errors.
 */
export function authPlugin(services: Services) {
  const { store, clock, config } = services;
  const principals = new WeakMap<Request, Principal>();
  return new Elysia({ name: "auth.guard" }).macro({
    auth: (accept: "session" | "sessionOrKey") => ({
      async transform({ request }) {
        const principal = await authenticate(
          { request, sessionToken: readCookie(request, SESSION_COOKIE), store, clock, publicUrl: config.publicUrl, keyPrefix: config.keyPrefix },
          { session: true, apiKey: accept === "sessionOrKey" },
        );
        principals.set(request, principal);
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
