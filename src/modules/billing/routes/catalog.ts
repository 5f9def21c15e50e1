import { Elysia } from "elysia";
import type { Services } from "../../../services";
import { CommonErrors } from "../../../http/model";
import { requestLanguage } from "../../../http/request";
import { authPlugin } from "../../auth/plugin";
import { CatalogResponse, LanguageQuery } from "../model";
import { catalogJSON } from "../service";

/** GET /api/v1/customer/billing/catalog. */
export function catalogRoute(services: Services) {
  return new Elysia({ name: "billing.catalog" }).use(authPlugin(services)).get("/catalog", ({ request }) => catalogJSON(services, requestLanguage(request)), {
    query: LanguageQuery,
    response: { 200: CatalogResponse, ...CommonErrors },
    detail: {
      summary: "Packs and plans on sale",
      description: "Public: no credential needed.",
      tags: ["Billing"],
      operationId: "getBillingCatalog",
      security: [],
    },
  });
}
