import { Elysia } from "elysia";
import packageJSON from "../package.json";
import { httpBase } from "./http/base";
import { docsRoutes } from "./http/docs";
import { authRoutes } from "./modules/auth";
import { keyRoutes } from "./modules/keys";
import { billingRoutes } from "./modules/billing";
import { requestObservability } from "./http/observability";
import { dashboardRoutes } from "./modules/dashboard";
import { productRoutes } from "./modules/products";
import { systemRoutes } from "./modules/system";
import type { Services } from "./services";

export const VERSION: string = packageJSON.version;

/** Builds the whole HTTP app from its services. It does not listen: `serve` does, tests call handle(). */
export function createApp(services: Services) {
  const { config, logger } = services;
  return new Elysia({ normalize: true })
    .use(requestObservability({ logger, metrics: services.metrics, keyPrefix: config.keyPrefix }))
    .use(httpBase({ typeBase: config.errorTypeBase, bodyLimitBytes: config.bodyLimitBytes, logger, publicUrl: config.publicUrl }))
    .use(docsRoutes(VERSION, { typeBase: config.errorTypeBase }))
    .use(systemRoutes(services))
    .use(productRoutes(services))
    .use(authRoutes(services))
    .use(keyRoutes(services))
    .use(billingRoutes(services))
    .use(dashboardRoutes(services));
}

export type App = ReturnType<typeof createApp>;
