import { Elysia } from "elysia";
import type { Services } from "../../services";
import { billingPageRoutes } from "./page-routes";
import { balanceRoute } from "./routes/balance";
import { catalogRoute } from "./routes/catalog";
import { checkoutRoutes } from "./routes/checkout";
import { invoicesRoute } from "./routes/invoices";
import { portalRoute } from "./routes/portal";
import { stripeWebhookRoutes } from "./routes/stripe-webhook";
import { transactionsRoute } from "./routes/transactions";
import { usageRoute } from "./routes/usage";

/** The customer billing API (docs/api.md, "Billing"), the local provider's pages and the Stripe webhook. */
export function billingRoutes(services: Services) {
  return new Elysia({ name: "billing" }).use(billingAPIRoutes(services)).use(billingPageRoutes(services)).use(stripeWebhookRoutes(services));
}

function billingAPIRoutes(services: Services) {
  return new Elysia({ name: "billing.api", prefix: "/api/v1/customer/billing" })
    .use(catalogRoute(services))
    .use(balanceRoute(services))
    .use(transactionsRoute(services))
    .use(usageRoute(services))
    .use(invoicesRoute(services))
    .use(checkoutRoutes(services))
    .use(portalRoute(services));
}
