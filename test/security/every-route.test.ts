// Every operation the served OpenAPI document secures runs the shared security cases
// (test/support/security.ts), with the credential its `security` requirement names. The table below
// gives each one the path and body to send; an operation the document secures and the table does not
// list fails here, so a new authenticated route cannot go without the cases.
import { afterAll, describe, expect, test } from "bun:test";
import { type SecuredEndpoint, securityTests } from "../support/security";
import { createTestContext, json } from "../support/context";

type Fixture = Partial<Pick<SecuredEndpoint, "body" | "feedTokenScope">> & {
  /** The path to send, for an operation whose path has parameters (authentication comes before any look-up, so an unknown id will do). */
  path?: string;
};

const GTIN = "4006381333931";
const KEYS = "/api/v1/customer/api-keys";
const BILLING = "/api/v1/customer/billing";
const WEBHOOKS = "/api/v1/customer/webhooks";
const WATCHES = "/api/v1/customer/watches";
const UNKNOWN_WEBHOOK = `${WEBHOOKS}/whe_0000000000000unknown000000`;
const UNKNOWN_WATCH = `${WATCHES}/wch_0000000000000unknown000000`;

/** Every secured operation, as `METHOD /path` the document spells it. */
const FIXTURES: Record<string, Fixture> = {
  "GET /api/v1/products/{gtin}/price": { path: `/api/v1/products/${GTIN}/price` },
  "POST /api/v1/products/prices": { body: () => ({ gtins: [GTIN] }) },
  "GET /api/v1/products/{gtin}/price/history": { path: `/api/v1/products/${GTIN}/price/history` },

  "POST /api/v1/auth/refresh": {},
  "POST /api/v1/auth/logout": {},
  "GET /api/v1/auth/me": {},

  [`GET ${KEYS}`]: {},
  [`POST ${KEYS}`]: { body: () => ({ name: "attacker" }) },
  [`POST ${KEYS}/{id}/rotate`]: { path: `${KEYS}/key_whatever/rotate` },
  [`PATCH ${KEYS}/{id}`]: { path: `${KEYS}/key_whatever`, body: () => ({ rateLimit: 1 }) },
  [`POST ${KEYS}/{id}/revoke`]: { path: `${KEYS}/key_whatever/revoke` },

  [`GET ${BILLING}/balance`]: {},
  [`GET ${BILLING}/transactions`]: {},
  [`GET ${BILLING}/usage`]: {},
  [`GET ${BILLING}/invoices`]: {},
  [`POST ${BILLING}/checkout/pack`]: { body: () => ({ packId: "pack-1k" }) },
  [`POST ${BILLING}/checkout/subscription`]: { body: () => ({ planId: "basic-monthly" }) },
  [`POST ${BILLING}/portal`]: { body: () => ({}) },
  "GET /billing/checkout/{id}": { path: "/billing/checkout/ord_0000000000000unknown000000" },
  "POST /billing/checkout/{id}/pay": { path: "/billing/checkout/ord_0000000000000unknown000000/pay" },
  "GET /billing/invoices/{id}": { path: "/billing/invoices/inv_0000000000000unknown000000" },
  "GET /billing/portal": {},
  "POST /billing/portal/subscriptions/{id}/cancel": { path: "/billing/portal/subscriptions/sub_0000000000000unknown000000/cancel" },

  [`GET ${WEBHOOKS}/settings`]: {},
  [`PATCH ${WEBHOOKS}/settings`]: { body: () => ({ lowCreditThreshold: 10 }) },
  [`GET ${WEBHOOKS}`]: {},
  [`POST ${WEBHOOKS}`]: { body: () => ({ url: "https://a.example/x", eventTypes: ["key.created"] }) },
  [`GET ${WEBHOOKS}/{id}`]: { path: UNKNOWN_WEBHOOK },
  [`DELETE ${WEBHOOKS}/{id}`]: { path: UNKNOWN_WEBHOOK },
  [`POST ${WEBHOOKS}/{id}/rotate-secret`]: { path: `${UNKNOWN_WEBHOOK}/rotate-secret` },
  [`POST ${WEBHOOKS}/{id}/enable`]: { path: `${UNKNOWN_WEBHOOK}/enable` },
  [`POST ${WEBHOOKS}/{id}/test`]: { path: `${UNKNOWN_WEBHOOK}/test` },
  [`GET ${WEBHOOKS}/{id}/deliveries`]: { path: `${UNKNOWN_WEBHOOK}/deliveries` },

  [`GET ${WATCHES}`]: {},
  [`POST ${WATCHES}`]: { body: () => ({ gtin: GTIN, trigger: "any-change" }) },
  [`GET ${WATCHES}/{id}`]: { path: UNKNOWN_WATCH },
  [`DELETE ${WATCHES}/{id}`]: { path: UNKNOWN_WATCH },

  "POST /api/v1/feeds/push": { feedTokenScope: "push" },
  "GET /api/v1/feeds/sources": { feedTokenScope: "read" },
  "GET /api/v1/feeds/sources/{id}/runs": { path: "/api/v1/feeds/sources/src_0000000000000unknown000000/runs", feedTokenScope: "read" },
};

/** The credential a `security` requirement names, as the shared cases call it; null for one they do not know. */
function accepted(security: Array<Record<string, string[]>>): SecuredEndpoint["accepts"] | null {
  const schemes = security
    .map((requirement) => Object.keys(requirement).sort().join("+"))
    .sort()
    .join(" or ");
  const kinds: Record<string, SecuredEndpoint["accepts"]> = { session: "session", apiKey: "key", "apiKey or session": "sessionOrKey", feedToken: "feedToken" };
  return kinds[schemes] ?? null;
}

const context = await createTestContext();
afterAll(() => context.close());
const document = await json(await context.request("/openapi.json"));

const METHODS = new Set(["get", "put", "post", "delete", "options", "head", "patch", "trace"]);
const secured = Object.entries<Record<string, any>>(document.paths).flatMap(([path, item]) =>
  Object.entries<any>(item)
    .filter(([method, operation]) => METHODS.has(method) && (operation.security ?? document.security ?? []).length > 0)
    .map(([method, operation]) => ({ operation: `${method.toUpperCase()} ${path}`, security: operation.security ?? document.security })),
);

describe("the secured operations of the OpenAPI document", () => {
  test("there are some, and each has a fixture here and a credential the shared cases know", () => {
    expect(secured.length).toBeGreaterThan(0);
    expect(secured.filter(({ operation }) => FIXTURES[operation] === undefined).map(({ operation }) => operation)).toEqual([]);
    expect(secured.filter(({ security }) => accepted(security) === null).map(({ operation, security }) => `${operation} ${JSON.stringify(security)}`)).toEqual(
      [],
    );
  });

  test("every fixture names an operation the document secures (none is left over from a removed or now public route)", () => {
    const documented = new Set(secured.map(({ operation }) => operation));
    expect(Object.keys(FIXTURES).filter((operation) => !documented.has(operation))).toEqual([]);
  });
});

for (const { operation, security } of secured) {
  const fixture = FIXTURES[operation];
  const accepts = accepted(security);
  if (fixture === undefined || accepts === null) continue;
  const [method, template] = operation.split(" ") as [SecuredEndpoint["method"], string];
  const path = fixture.path ?? template;
  describe(operation, () => {
    test("its fixture path fills every path parameter", () => {
      expect(path).not.toContain("{");
    });
    securityTests({ method, path: () => path, body: fixture.body, accepts, feedTokenScope: fixture.feedTokenScope }, () => context);
  });
}
