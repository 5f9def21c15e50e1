import type { Config } from "../../config";
import { SESSION_COOKIE } from "./guard";

/** Secure unless the service runs in development mode on plain HTTP (docs/api.md, "Sessions"). */
export function isSecureCookie(config: Pick<Config, "env" | "publicUrl">): boolean {
  return !(config.env === "development" && config.publicUrl.startsWith("http:"));
}

function attributes(secure: boolean): string {
  return `Path=/; HttpOnly; SameSite=Lax${secure ? "; Secure" : ""}`;
}

/** The Set-Cookie value that hands a session token to the browser until `expiresAt`. */
export function sessionCookie(token: string, expiresAt: number, now: number, secure: boolean): string {
  const maxAge = Math.max(0, Math.round((expiresAt - now) / 1000));
  return `${SESSION_COOKIE}=${token}; Max-Age=${maxAge}; ${attributes(secure)}`;
}

/** The Set-Cookie value that makes the browser forget the session cookie. */
export function clearedSessionCookie(secure: boolean): string {
  return `${SESSION_COOKIE}=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; ${attributes(secure)}`;
}

/**
 * The value of cookie `name` in the request's Cookie header. Read from the request itself, never from
 * Elysia's `cookie` context: Elysia builds that context only when it finds the word `cookie` in the
 * handler's source text, a search that minified source defeats (the built executable then handed every
 * session route an undefined `cookie`).
 */
export function readCookie(request: Request, name: string): string | undefined {
  const header = request.headers.get("cookie");
  if (header === null) return undefined;
  return new Bun.CookieMap(header).get(name) ?? undefined;
}
