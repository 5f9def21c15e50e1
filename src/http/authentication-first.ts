import { pathPattern, type Route } from "./head";
import { notJSON, type Problem } from "./problem";

/**
 * Authentication comes before every check of the request itself, so a caller without a credential
 * learns nothing from a route but 401. The checks that run before a route's authentication (the
 * media type when the request arrives, repeated query parameters before validation, a body that is
 * not JSON while it is parsed) defer their problem on a secured route; the route's authentication
 * throws it once the caller is known.
 */
const deferred = new WeakMap<Request, Problem>();

/** Keeps the first problem of the request until its caller is authenticated. */
export function deferUntilAuthenticated(request: Request, problem: Problem): void {
  if (!deferred.has(request)) deferred.set(request, problem);
}

/** Called by every authentication right after it succeeds: throws the request's deferred problem. */
export function afterAuthentication(request: Request): void {
  const problem = deferred.get(request);
  if (problem === undefined) return;
  deferred.delete(request);
  throw problem;
}

/** Whether a route documents a credential (its OpenAPI `security` is not empty). */
export function isSecured(route: Route | undefined): boolean {
  return (route?.hooks?.detail?.security?.length ?? 0) > 0;
}

/** Whether the route at METHOD and PATH needs a credential. Built once, on first use. */
export function securedRoutes(routes: () => Route[]): (method: string, path: string) => boolean {
  let patterns: Array<{ method: string; pattern: RegExp }> | null = null;
  return (method, path) => {
    patterns ??= routes()
      .filter(isSecured)
      .map((route) => ({ method: route.method, pattern: pathPattern(route.path) }));
    return patterns.some((entry) => entry.method === method && entry.pattern.test(path));
  };
}

/**
 * A parse hook for a secured JSON route that authenticates in its handler: a body that is not JSON
 * is deferred (the handler's authentication throws it), and the route sees `null`.
 */
export async function parseJSONAfterAuthentication({ request }: { request: Request }): Promise<unknown> {
  const text = await request.text();
  try {
    return JSON.parse(text);
  } catch {
    deferUntilAuthenticated(request, notJSON());
    return null;
  }
}
