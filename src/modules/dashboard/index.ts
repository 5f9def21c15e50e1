import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { ProblemSchema } from "../../http/model";
import { Problem } from "../../http/problem";
import { requestLanguage } from "../../http/request";
import { assetResponse, DASHBOARD_CSP, dashboardAssets, type SignInMode } from "./assets";
import { oidcSignInRoutes } from "./sign-in-routes";

/** Every URL of the dashboard answers with the same shell page; the script renders the page of the URL. */
export const DASHBOARD_PAGES = [
  "/dashboard",
  "/dashboard/sign-in",
  "/dashboard/keys",
  "/dashboard/billing",
  "/dashboard/webhooks",
  "/dashboard/products",
  "/dashboard/watches",
  "/dashboard/quickstart",
] as const;

const HTML = t.String({ description: "HTML page" });
const PAGE_HEADERS = { "content-security-policy": DASHBOARD_CSP, "cache-control": "no-cache" };
const ASSET_HEADERS = { "cache-control": "public, max-age=31536000, immutable" };

/**
 * The customer dashboard, served by the binary: HTML, CSS and script embedded at build time, the
 * browser sign-in (OIDC code flow), and `/` leading to it. The dashboard itself talks only to the
 * public API.
 */
export function dashboardRoutes(services: Services) {
  const signInMode: SignInMode = services.oidc !== null ? "oidc" : services.config.env === "development" ? "development" : "off";
  const assets = dashboardAssets(signInMode);

  const routes = new Elysia({ name: "dashboard" })
    .use(oidcSignInRoutes(services))
    .get("/", () => new Response(null, { status: 302, headers: { location: "/dashboard" } }), {
      response: { 302: t.String({ maxLength: 0, description: "Redirect to /dashboard" }) },
      detail: { hide: true },
    })
    .get(
      "/dashboard/assets/:file",
      ({ params, request }) => {
        const file = assets.files.get(params.file);
        if (file === undefined) throw new Problem("not-found");
        return assetResponse(file, request, ASSET_HEADERS);
      },
      {
        params: t.Object({ file: t.String({ maxLength: 100 }) }),
        response: { 200: t.String({ description: "Script or stylesheet of the dashboard" }), 404: ProblemSchema },
        detail: { hide: true },
      },
    );
  for (const path of DASHBOARD_PAGES) {
    routes.get(path, ({ request }) => assetResponse(assets.shell[requestLanguage(request)], request, PAGE_HEADERS), {
      response: { 200: HTML },
      detail: { hide: true },
    });
  }
  return routes;
}
