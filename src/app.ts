import { Elysia } from "elysia";
import packageJSON from "../package.json";
import { httpBase } from "./http/base";
import { docsRoutes } from "./http/docs";
import { refuseHEADOnAPI, type Route } from "./http/head";
import { authRoutes } from "./modules/auth";
import { keyRoutes } from "./modules/keys";
import { billingRoutes } from "./modules/billing";
import { requestObservability } from "./http/observability";
import { dashboardRoutes } from "./modules/dashboard";
import { FEED_PUSH_PATH, feedRoutes } from "./modules/feeds";
import { productRoutes } from "./modules/products";
import { historyRoutes } from "./modules/history";
import { systemRoutes } from "./modules/system";
import { webhookRoutes } from "./modules/webhooks";
import { watchRoutes } from "./modules/watches";
import type { Services } from "./services";

export const VERSION: string = packageJSON.version;

/** Builds the whole HTTP app from its services. It does not listen: `serve` does, tests call handle(). */
export function createApp(services: Services) {
  const { config, logger } = services;
  const app = new Elysia({ normalize: true })
    .use(requestObservability({ logger, metrics: services.metrics, keyPrefix: config.keyPrefix }))
    .use(
      httpBase({
        typeBase: config.errorTypeBase,
        bodyLimitBytes: config.bodyLimitBytes,
        logger,
        publicUrl: config.publicUrl,
        routes: (): Route[] => app.routes,
        streamedBodyPaths: [FEED_PUSH_PATH],
      }),
    )
    .use(docsRoutes(VERSION, { typeBase: config.errorTypeBase, publicUrl: config.publicUrl, routes: (): Route[] => app.routes }))
    .use(systemRoutes(services))
    .use(productRoutes(services))
    .use(historyRoutes(services))
    .use(authRoutes(services))
    .use(keyRoutes(services))
    .use(billingRoutes(services))
    .use(webhookRoutes(services))
    .use(watchRoutes(services))
    .use(feedRoutes(services))
    .use(dashboardRoutes(services));
  return app.onRequest(refuseHEADOnAPI(() => app.routes));
}

export type App = ReturnType<typeof createApp>;
