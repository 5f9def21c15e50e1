import { expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { createTestContext, json } from "../support/context";

test("the OpenAPI document stays valid and documents every billing route with its credentials and errors", async () => {
  const context = await createTestContext();
  try {
    const document = await json(await context.request("/openapi.json"));
    expect(await new Validator().validate(document)).toEqual({ valid: true });
    const operations = Object.entries<Record<string, { operationId?: string; tags?: string[]; security?: unknown; responses: Record<string, unknown> }>>(
      document.paths,
    ).flatMap(([path, methods]) => Object.entries(methods).map(([method, operation]) => ({ path, method, ...operation })));
    const billing = operations.filter((op) => op.path.includes("/billing") || op.path.startsWith("/api/v1/webhooks/"));
    expect(billing.map((op) => op.operationId).sort()).toEqual([
      "cancelLocalSubscription",
      "getBillingBalance",
      "getBillingCatalog",
      "getBillingReturnPage",
      "getBillingUsage",
      "getLocalBillingPortal",
      "getLocalCheckoutPage",
      "getLocalInvoicePage",
      "listBillingInvoices",
      "listBillingTransactions",
      "openBillingPortal",
      "payLocalOrder",
      "receiveStripeWebhook",
      "startPackCheckout",
      "startSubscriptionCheckout",
    ]);
    const byId = Object.fromEntries(billing.map((op) => [op.operationId, op]));
    expect(byId.getBillingCatalog!.security).toEqual([]);
    expect(byId.getBillingBalance!.security).toEqual([{ session: [] }, { apiKey: [] }]);
    expect(byId.getBillingUsage!.security).toEqual([{ session: [] }, { apiKey: [] }]);
    expect(byId.startPackCheckout!.security).toEqual([{ session: [] }]);
    expect(Object.keys(byId.startPackCheckout!.responses)).toEqual(expect.arrayContaining(["201", "400", "401", "403", "422", "503"]));
    expect(Object.keys(byId.receiveStripeWebhook!.responses)).toEqual(expect.arrayContaining(["200", "400"]));
  } finally {
    await context.close();
  }
});
