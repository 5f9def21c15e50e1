import packageJSON from "../../package.json";
import { Counter, Gauge, Histogram, LabeledGauge, LATENCY_BUCKETS, Registry } from "./metrics";

/** Every metric the service exports at /metrics; names are prefixed so they never clash in a shared Prometheus. */
export function createServiceMetrics() {
  const registry = new Registry();
  const startedAt = Date.now() / 1000;
  return {
    registry,
    requests: registry.register(
      new Counter("price_service_http_requests_total", "HTTP requests by method, route, status and billing reason (empty when the route bills nothing)", [
        "method",
        "route",
        "status",
        "reason",
      ]),
    ),
    requestDuration: registry.register(
      new Histogram(
        "price_service_http_request_duration_seconds",
        "Time from request received to response handed to the server, by route",
        ["method", "route"],
        LATENCY_BUCKETS,
      ),
    ),
    creditsDebited: registry.register(new Counter("price_service_credits_debited_total", "Credits debited by billed look-ups")),
    storeDuration: registry.register(
      new Histogram(
        "price_service_db_operation_duration_seconds",
        "Store calls by operation (includes the wait for a group commit)",
        ["operation"],
        LATENCY_BUCKETS,
      ),
    ),
    storeErrors: registry.register(new Counter("price_service_db_operation_errors_total", "Store calls that threw, by operation", ["operation"])),
    feedRuns: registry.register(
      new Counter("price_service_feed_runs_total", "Feed runs (pulls, files, pushes) by source and status (ok, not-modified, failed)", ["source", "status"]),
    ),
    feedRecords: registry.register(
      new Counter("price_service_feed_records_total", "Feed records read by source and outcome (accepted, rejected)", ["source", "outcome"]),
    ),
    feedLastSuccess: registry.register(
      new LabeledGauge(
        "price_service_feed_last_success_timestamp_seconds",
        "End of the source's last successful run (ok or not-modified) since the Unix epoch; 0 if it never succeeded",
        ["source"],
      ),
    ),
    feedOffers: registry.register(new LabeledGauge("price_service_feed_offers", "Offers last written by the source", ["source"])),
    feedFreshOffers: registry.register(
      new LabeledGauge("price_service_feed_fresh_offers", "Offers of the source observed within FRESHNESS_WINDOW", ["source"]),
    ),
    feedFreshRatio: registry.register(
      new LabeledGauge("price_service_feed_fresh_ratio", "Share of the source's offers still fresh (0..1; 0 when it has none)", ["source"]),
    ),
    process: [
      registry.register(new Gauge("price_service_build_info", "Version of the running executable", () => 1, { version: packageJSON.version })),
      registry.register(new Gauge("process_start_time_seconds", "Start time of the process since the Unix epoch", () => startedAt)),
      registry.register(new Gauge("process_resident_memory_bytes", "Resident memory size", () => process.memoryUsage.rss())),
    ],
  };
}

export type ServiceMetrics = ReturnType<typeof createServiceMetrics>;
