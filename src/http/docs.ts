import { openapi } from "@elysiajs/openapi";
import { Elysia } from "elysia";
// Embedded by `bun build --compile`; served locally so /docs works with no network.
import scalarBundle from "@scalar/api-reference/browser/standalone.js" with { type: "file" };
import type { Route } from "./head";
import { finishOpenAPIDocument } from "./openapi-document";
import { PROBLEMS } from "./problem";
import { PriceChangedEventSchema } from "../modules/watches/model";

const DOCS_CSP =
  "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";

export function docsRoutes(version: string, options: { typeBase: string; publicUrl: string; routes: () => Route[] }) {
  // The generator rebuilds its document only when routes are added; finish each build once.
  const finished = new WeakMap<object, object>();
  return new Elysia({ name: "docs" })
    .onAfterHandle(({ request, response, set }) => {
      const path = new URL(request.url).pathname;
      if (path.startsWith("/docs")) set.headers["content-security-policy"] = DOCS_CSP;
      if (path === "/openapi.json" && typeof response === "object" && response !== null && !(response instanceof Response)) {
        let document = finished.get(response);
        if (document === undefined) finished.set(response, (document = finishOpenAPIDocument(response, options)));
        return document;
      }
    })
    .get(
      "/docs/assets/scalar.js",
      ({ set }) => {
        set.headers["cache-control"] = "public, max-age=86400";
        return new Response(Bun.file(scalarBundle), { headers: { "content-type": "text/javascript; charset=utf-8" } });
      },
      { detail: { hide: true } },
    )
    .use(
      openapi({
        path: "/docs",
        specPath: "/openapi.json",
        provider: "scalar",
        // No feature that reaches out: the AI agent and developer tools call Scalar's servers (the CSP would block them anyway).
        scalar: {
          cdn: "/docs/assets/scalar.js",
          withDefaultFonts: false,
          hideClientButton: true,
          telemetry: false,
          agent: { disabled: true },
          showDeveloperTools: "never",
        } as never,
        documentation: {
          info: {
            title: "price-service",
            version,
            description:
              "Fresh product price offers by GTIN, billed in credits. Data requests use `Authorization: Bearer <API_KEY>`; key management and checkout use the `session` cookie. Every error is an RFC 9457 problem; the slugs are: " +
              Object.keys(PROBLEMS).join(", ") +
              ".",
          },
          tags: [
            { name: "Products", description: "Price data by GTIN, billed in credits (API key)" },
            { name: "Sessions", description: "Sign-in and the `session` cookie" },
            { name: "API keys", description: "The organization's API keys (session cookie)" },
            { name: "Billing", description: "Credits, transactions, invoices and checkout" },
            { name: "Billing pages", description: "HTML pages of the local payment provider (development)" },
            { name: "Webhooks", description: "Events from the payment provider" },
            { name: "Webhook endpoints", description: "Events sent to the organization's receivers, signed the Standard Webhooks way (session cookie)" },
            {
              name: "Price watches",
              description: "Products whose price moves the organization is told about with `price.changed` webhook events (session cookie or API key)",
            },
            { name: "Operations", description: "Health, readiness, metrics and problem type pages" },
            { name: "Feeds", description: "Offer feeds: pushes from price-producing systems and the operator's source reports (feed tokens)" },
          ],
          webhooks: {
            "price.changed": {
              post: {
                summary: "A watched price moved",
                description:
                  "Sent to the organization's webhook endpoints subscribed to `price.changed` when a price watch fires (see Price watches), signed the Standard Webhooks way (`webhook-id`, `webhook-timestamp`, `webhook-signature`). Each event was billed `WATCH_EVENT_CREDIT_COST` credits.",
                tags: ["Price watches"],
                operationId: "priceChangedEvent",
                security: [],
                requestBody: {
                  required: true,
                  content: {
                    "application/json": {
                      schema: {
                        type: "object",
                        required: ["type", "timestamp", "data"],
                        properties: {
                          type: { type: "string", const: "price.changed" },
                          timestamp: { type: "string", format: "date-time" },
                          data: { $ref: "#/components/schemas/PriceChangedEvent" },
                        },
                      },
                    },
                  },
                },
                responses: { "200": { description: "Any 2xx acknowledges the event; anything else is retried" } },
              },
            },
          } as never,
          components: {
            schemas: { PriceChangedEvent: PriceChangedEventSchema as never },
            securitySchemes: {
              apiKey: { type: "http", scheme: "bearer", description: "An API key, `pps_…`, in `Authorization: Bearer <API_KEY>`" },
              session: { type: "apiKey", in: "cookie", name: "session", description: "The session cookie set by sign-in (dashboard and key management)" },
              feedToken: {
                type: "http",
                scheme: "bearer",
                description:
                  "A feed token, `ftk_….…`, made by the operator with `price-service feeds token create` (push: one source; read: the source list and reports)",
              },
            },
          },
        },
        exclude: { paths: ["/docs/assets/scalar.js"] },
      }),
    );
}
