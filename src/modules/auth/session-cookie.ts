import type { Config } from "../../config";
import { SESSION_COOKIE } from "./guard";

/** Secure unless the service runs in development mode on plain HTTP (CONTRACT.md "Sessions and OIDC"). */
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
