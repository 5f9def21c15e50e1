// The dashboard's files as the server sends them: built once per process, gzipped once, named by
// content hash so browsers may cache them for good.
import type { Language } from "../../http/i18n";
import { DASHBOARD_SCRIPT, DASHBOARD_STYLE } from "./assets.generated";

export interface StaticAsset {
  contentType: string;
  body: Uint8Array<ArrayBuffer>;
  gzipped: Uint8Array<ArrayBuffer>;
}

export type SignInMode = "oidc" | "development" | "off";

/**
 * The dashboard pages' Content-Security-Policy: scripts and styles only from this origin (no inline
 * script or style), API calls only to this origin, DOM sinks locked by Trusted Types (the client
 * builds its DOM without HTML strings), no framing, no <base>, forms post only here.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "require-trusted-types-for 'script'",
  "trusted-types 'none'",
].join("; ");

const encoder = new TextEncoder();

function asset(contentType: string, text: string): StaticAsset {
  const body = encoder.encode(text);
  return { contentType, body, gzipped: Bun.gzipSync(body, { level: 9 }) };
}

function fingerprint(text: string): string {
  return Bun.hash(text).toString(36);
}

export interface DashboardAssets {
  /** Asset file name (with its content hash) → file. */
  files: Map<string, StaticAsset>;
  /** The HTML page every dashboard URL answers with, per language. */
  shell: Record<Language, StaticAsset>;
}

const SHELL_TEXT: Record<Language, { title: string; noscript: string; loading: string }> = {
  en: { title: "price-service dashboard", noscript: "The dashboard needs JavaScript. The API itself works without it: see /docs.", loading: "Loading…" },
  fr: {
    title: "Tableau de bord price-service",
    noscript: "Le tableau de bord a besoin de JavaScript. L'API elle-même fonctionne sans : voir /docs.",
    loading: "Chargement…",
  },
};

function shellHTML(language: Language, signInMode: SignInMode, scriptName: string, styleName: string): string {
  const text = SHELL_TEXT[language];
  return (
    `<!doctype html><html lang="${language}"><head><meta charset="utf-8">` +
    `<meta name="viewport" content="width=device-width,initial-scale=1"><meta name="color-scheme" content="light dark">` +
    `<meta name="sign-in" content="${signInMode}"><title>${text.title}</title><link rel="icon" href="data:,">` +
    `<link rel="stylesheet" href="/dashboard/assets/${styleName}"><script type="module" src="/dashboard/assets/${scriptName}"></script></head>` +
    `<body><main id="main"><p>${text.loading}</p><noscript><p>${text.noscript}</p></noscript></main></body></html>`
  );
}

const SCRIPT_NAME = `dashboard-${fingerprint(DASHBOARD_SCRIPT)}.js`;
const STYLE_NAME = `dashboard-${fingerprint(DASHBOARD_STYLE)}.css`;
/** Compressed on first use, then shared by every app of the process (tests build many). */
let files: Map<string, StaticAsset> | null = null;

/** The dashboard's shell pages and assets for this service's sign-in mode. */
export function dashboardAssets(signInMode: SignInMode): DashboardAssets {
  const [scriptName, styleName] = [SCRIPT_NAME, STYLE_NAME];
  const html = "text/html; charset=utf-8";
  files ??= new Map([
    [scriptName, asset("text/javascript; charset=utf-8", DASHBOARD_SCRIPT)],
    [styleName, asset("text/css; charset=utf-8", DASHBOARD_STYLE)],
  ]);
  return {
    files,
    shell: { en: asset(html, shellHTML("en", signInMode, scriptName, styleName)), fr: asset(html, shellHTML("fr", signInMode, scriptName, styleName)) },
  };
}

/** The asset, gzipped when the client accepts it. */
export function assetResponse(file: StaticAsset, request: Request, headers: Record<string, string>): Response {
  const gzip = /\bgzip\b/i.test(request.headers.get("accept-encoding") ?? "");
  return new Response(gzip ? file.gzipped : file.body, {
    headers: { "content-type": file.contentType, vary: "accept-encoding", ...(gzip ? { "content-encoding": "gzip" } : {}), ...headers },
  });
}

/**
 * What the first page of the dashboard (its HTML, script and stylesheet, gzipped) may weigh: every
 * page is in the one script, both languages included, so the sign-in page carries them all.
 */
export const FIRST_PAGE_BUDGET_BYTES = 24_000;
