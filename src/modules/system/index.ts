import { Elysia, t } from "elysia";
import type { Services } from "../../services";
import { PROBLEMS, type ProblemSlug } from "../../http/problem";
import { Problem } from "../../http/problem";
import { Problems } from "../../http/model";
import { refreshFreshnessMetrics } from "../feeds/freshness";

function escapeHTML(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function problemPage(slug: ProblemSlug): string {
  const entry = PROBLEMS[slug];
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${entry.status} ${escapeHTML(entry.title)}</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;color:#1a1a1a}code{background:#f2f2f2;padding:.1rem .3rem}</style></head>
<body><h1>${escapeHTML(entry.title)}</h1><p>HTTP status <code>${entry.status}</code>, problem type <code>${slug}</code>.</p>
<p>${escapeHTML(entry.en)}</p><p lang="fr">${escapeHTML(entry.fr)}</p>
<p>Every error body is an RFC 9457 problem: <code>type</code>, <code>title</code>, <code>status</code>, <code>detail</code> and <code>requestId</code> (quote it to support).</p></body></html>`;
}

const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const HTML_HEADERS = {
  "content-type": "text/html; charset=utf-8",
  "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
};

export function systemRoutes(services: Services) {
  return new Elysia({ name: "system" })
    .get("/healthz", () => ({ status: "ok" as const }), {
      response: { 200: t.Object({ status: t.Literal("ok") }, { description: "The process is up" }), 500: Problems(["internal"]) },
      detail: {
        summary: "Process is up",
        description: "Liveness: 200 while the process answers; it does not touch the database.",
        tags: ["Operations"],
        operationId: "getHealth",
      },
    })
    .get(
      "/readyz",
      async () => {
        if (!(await services.store.isReachable()))
          throw new Problem("unavailable", { detail: { en: "The database is not reachable.", fr: "La base de données est injoignable." } });
        return { status: "ready" as const, database: services.store.dialect };
      },
      {
        response: {
          200: t.Object({ status: t.Literal("ready"), database: t.String({ examples: ["sqlite"] }) }, { description: "The database answers" }),
          500: Problems(["internal"]),
          503: Problems(["unavailable"]),
        },
        detail: {
          summary: "Database is reachable",
          description: "Readiness: 200 when the database answers, 503 `unavailable` otherwise.",
          tags: ["Operations"],
          operationId: "getReadiness",
        },
      },
    )
    .get(
      "/metrics",
      async ({ set }) => {
        set.headers["content-type"] = METRICS_CONTENT_TYPE;
        // The feed gauges need the database; when it does not answer, the rest of the metrics still do.
        await refreshFreshnessMetrics(services.metrics, services.store, services.clock.now(), services.config.freshnessWindowMs).catch((error: unknown) =>
          services.logger.warn("feed freshness metrics not refreshed", { error: String(error) }),
        );
        return services.metrics.registry.render();
      },
      {
        response: {
          200: t.String({
            contentMediaType: METRICS_CONTENT_TYPE,
            description: "Prometheus text exposition format",
            examples: ['price_service_http_requests_total{method="GET",route="/api/v1/products/:gtin/price",status="200",reason="fresh-offer"} 42\n'],
          }),
          500: Problems(["internal"]),
        },
        detail: {
          summary: "Prometheus metrics",
          description:
            "Requests by route, status and billing reason; latency histograms; credits debited; store timings; per feed source its runs, last success and share of fresh offers. Scrape it from inside your network.",
          tags: ["Operations"],
          operationId: "getMetrics",
        },
      },
    )
    .get(
      "/problems/:slug",
      ({ params }) => {
        // Own keys only: "constructor" or "toString" are not problem types.
        if (!Object.hasOwn(PROBLEMS, params.slug)) throw new Problem("not-found");
        return new Response(problemPage(params.slug as ProblemSlug), { headers: HTML_HEADERS });
      },
      {
        params: t.Object({ slug: t.String({ examples: ["insufficient-credits"], description: "A problem type slug" }) }),
        response: { 200: t.String({ contentMediaType: "text/html", description: "HTML page" }), 404: Problems(["not-found"]), 500: Problems(["internal"]) },
        detail: {
          summary: "Human page for a problem type",
          description: "The HTML page a problem's `type` URI leads to, in English and French.",
          tags: ["Operations"],
          operationId: "getProblemType",
        },
      },
    );
}
