import { Problem } from "./problem";

export interface Route {
  method: string;
  path: string;
  hooks?: { query?: { noValidate?: boolean }; body?: unknown; detail?: { security?: unknown[] } };
}

/** `/api/v1/products/:gtin/price` → a pattern that matches its paths. */
export function pathPattern(path: string): RegExp {
  const escaped = path.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\/:[^/]+/g, "/[^/]+");
  return new RegExp(`^${escaped.replace(/\*$/, ".*")}$`);
}

/**
 * The methods the app answers at a path, for `Allow` (RFC 9110 §10.2.1): HEAD wherever GET is,
 * except under `/api/`, where HEAD is refused (see refuseHEADOnAPI). Built once, on first use,
 * from the routes the app has then.
 */
export function allowedMethods(routes: () => Route[]): (path: string) => string[] {
  let methodsByPattern: Array<{ pattern: RegExp; methods: string[] }> | null = null;
  return (path) => {
    methodsByPattern ??= [...Map.groupBy(routes(), (route) => route.path)].map(([routePath, group]) => ({
      pattern: pathPattern(routePath),
      methods: group.map((route) => route.method).filter((method) => method !== "HEAD"),
    }));
    const allowed = new Set(methodsByPattern.filter((entry) => entry.pattern.test(path)).flatMap((entry) => entry.methods));
    if (allowed.has("GET") && !path.startsWith("/api/")) allowed.add("HEAD");
    return [...allowed].sort();
  };
}

/** 405 with the path's methods in `Allow`, or 404 when no route has this path. */
export function wrongMethod(allowed: string[]): Problem {
  if (allowed.length === 0)
    return new Problem("not-found", {
      detail: { en: "No route matches this method and path.", fr: "Aucune route ne correspond à cette méthode et ce chemin." },
    });
  return new Problem("method-not-allowed", { headers: { allow: allowed.join(", ") } });
}

/**
 * Elysia answers HEAD by running the GET handler and dropping its body, so a HEAD on the data
 * endpoint was looked up, billed and recorded under its Idempotency-Key for an answer without a
 * body. Under `/api/` nothing is worth that: HEAD is refused with 405 and the path's methods in
 * `Allow`, before authentication, billing or any handler runs. Pages, assets and health checks keep
 * HEAD (their GETs change nothing).
 */
export function refuseHEADOnAPI(routes: () => Route[]): (context: { request: Request }) => void {
  const methodsAt = allowedMethods(routes);
  return ({ request }) => {
    if (request.method !== "HEAD") return;
    const path = new URL(request.url).pathname;
    if (!path.startsWith("/api/")) return;
    throw wrongMethod(methodsAt(path));
  };
}
