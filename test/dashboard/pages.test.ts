import { FIRST_PAGE_BUDGET_BYTES } from "../../src/modules/dashboard/assets";
import { describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { DASHBOARD_PAGES } from "../../src/modules/dashboard";
import type { OIDCVerifier } from "../../src/modules/auth/oidc";
import { createTestContext, json } from "../support/context";
import { generateDashboardAssets, GENERATED_PATH } from "../../tools/dashboard-assets";

const GZIP = { "accept-encoding": "gzip, deflate, br" };
const someVerifier: OIDCVerifier = { issuer: "https://id.example.com", verifyIDToken: async () => Promise.reject(new Error("not used")) };

function text(response: Response, gzipped: boolean): Promise<string> {
  return gzipped ? response.arrayBuffer().then((body) => new TextDecoder().decode(Bun.gunzipSync(new Uint8Array(body)))) : response.text();
}

/** The asset paths a shell page links to. */
function assetPaths(html: string): string[] {
  return [...html.matchAll(/(?:src|href)="(\/dashboard\/assets\/[^"]+)"/g)].map((match) => match[1]!);
}

describe("the dashboard pages", () => {
  test("/ leads to the dashboard", async () => {
    const context = await createTestContext();
    const response = await context.request("/");
    expect(response.status).toBe(302);
    expect(response.headers.get("location")).toBe("/dashboard");
    await context.close();
  });

  test("every dashboard page is the same small shell under a strict Content-Security-Policy, with no inline script or style", async () => {
    const context = await createTestContext();
    for (const path of DASHBOARD_PAGES) {
      const response = await context.request(path);
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toBe("text/html; charset=utf-8");
      const csp = response.headers.get("content-security-policy")!;
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("style-src 'self'");
      expect(csp).toContain("connect-src 'self'");
      expect(csp).toContain("frame-ancestors 'none'");
      expect(csp).toContain("require-trusted-types-for 'script'");
      expect(csp).not.toContain("unsafe-inline");
      expect(csp).not.toContain("unsafe-eval");
      expect(response.headers.get("x-content-type-options")).toBe("nosniff");
      const html = await response.text();
      // Every script has a src and no body; no style element or attribute; no event handler attribute.
      expect([...html.matchAll(/<script\b[^>]*>([^<]*)<\/script>/g)].map((match) => [match[0].includes(' src="/dashboard/assets/'), match[1]])).toEqual([
        [true, ""],
      ]);
      expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
      expect(html.length).toBeLessThan(1000);
    }
    await context.close();
  });

  test("the shell names the sign-in the service offers: OIDC, the development sign-in, or none", async () => {
    const meta = async (env: Record<string, string>, overrides = {}) => {
      const context = await createTestContext(env, overrides);
      const html = await (await context.request("/dashboard/sign-in")).text();
      await context.close();
      return /<meta name="sign-in" content="([a-z]+)">/.exec(html)?.[1];
    };
    expect(await meta({})).toBe("development");
    expect(await meta({ PRICE_ENV: "production" })).toBe("off");
    expect(await meta({ PRICE_ENV: "production" }, { oidc: someVerifier })).toBe("oidc");
  });

  test("the shell is in the browser's language, English by default", async () => {
    const context = await createTestContext();
    const lang = async (headers: Record<string, string>) => /<html lang="([a-z]+)">/.exec(await (await context.request("/dashboard", { headers })).text())?.[1];
    expect(await lang({})).toBe("en");
    expect(await lang({ "accept-language": "fr-FR,fr;q=0.9,en;q=0.5" })).toBe("fr");
    expect(await lang({ "accept-language": "de-DE" })).toBe("en");
    await context.close();
  });

  test("the script and stylesheet are embedded, gzipped when the browser accepts it, and cached for good under a content-hashed name", async () => {
    const context = await createTestContext();
    const html = await (await context.request("/dashboard")).text();
    const paths = assetPaths(html);
    expect(paths).toHaveLength(2);
    for (const path of paths) {
      expect(path).toMatch(/^\/dashboard\/assets\/dashboard-[0-9a-z]+\.(js|css)$/);
      const plain = await context.request(path);
      expect(plain.status).toBe(200);
      expect(plain.headers.get("content-type")).toBe(path.endsWith(".js") ? "text/javascript; charset=utf-8" : "text/css; charset=utf-8");
      expect(plain.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
      expect(plain.headers.get("vary")).toBe("accept-encoding");
      expect(plain.headers.get("content-encoding")).toBeNull();
      const body = await plain.text();

      const gzipped = await context.request(path, { headers: GZIP });
      expect(gzipped.headers.get("content-encoding")).toBe("gzip");
      const compressed = await gzipped.clone().arrayBuffer();
      expect(compressed.byteLength).toBeLessThan(body.length / 2);
      expect(await text(gzipped, true)).toBe(body);
    }
    const unknown = await context.request("/dashboard/assets/dashboard-old.js");
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("content-type")).toBe("application/problem+json");
    expect((await context.request("/dashboard/nothing-here")).status).toBe(404);
    await context.close();
  });

  test("the first page, its script and its stylesheet weigh under the budget together when gzipped", async () => {
    const context = await createTestContext();
    const page = await context.request("/dashboard/sign-in", { headers: GZIP });
    const html = await text(page.clone(), true);
    let total = (await page.arrayBuffer()).byteLength;
    for (const path of assetPaths(html)) total += (await (await context.request(path, { headers: GZIP })).arrayBuffer()).byteLength;
    expect(total).toBeLessThan(FIRST_PAGE_BUDGET_BYTES);
    await context.close();
  });

  test("the dashboard pages stay out of the API reference, and the two browser sign-in routes are documented", async () => {
    const context = await createTestContext();
    const document = await json(await context.request("/openapi.json"));
    expect(await new Validator().validate(document)).toEqual({ valid: true });
    const paths = Object.keys(document.paths);
    expect(paths.filter((path) => path === "/" || path.startsWith("/dashboard"))).toEqual([]);
    const start = document.paths["/api/v1/auth/oidc/start"].get;
    const callback = document.paths["/api/v1/auth/oidc/callback"].get;
    expect(start).toMatchObject({ operationId: "startBrowserSignIn", tags: ["Sessions"], security: [] });
    expect(callback).toMatchObject({ operationId: "finishBrowserSignIn", tags: ["Sessions"], security: [] });
    expect(Object.keys(start.responses)).toEqual(expect.arrayContaining(["302", "503"]));
    expect(Object.keys(callback.responses)).toEqual(expect.arrayContaining(["303", "503"]));
    await context.close();
  });

  test("the embedded dashboard is what scripts/build-dashboard.ts builds from the client sources", async () => {
    const committed = await Bun.file(GENERATED_PATH).text();
    // If this fails, run: bun scripts/build-dashboard.ts
    expect(committed === (await generateDashboardAssets())).toBe(true);
  });
});
