import type { FeedSource, NewFeedSource } from "../../src/db/feeds/records";
import type { Store } from "../../src/db/store";
import { newId } from "../../src/lib/ids";

/** One NDJSON feed line with an offer observed at `observedAt` (epoch ms). */
export function offerLine(gtin: string, merchantId: string, price: string, observedAt: number, extra: Record<string, string> = {}): string {
  return JSON.stringify({
    gtin,
    title: `Product ${gtin}`,
    merchantId,
    merchantName: `Merchant ${merchantId}`,
    price,
    currency: "EUR",
    availability: "in_stock",
    observedAt: new Date(observedAt).toISOString(),
    ...extra,
  });
}

/** The merchants a test source is bound to unless it says otherwise. */
export const TEST_MERCHANTS = ["shop-a", "shop-b"];

export async function addSource(store: Store, input: Partial<NewFeedSource> & { name: string; kind: NewFeedSource["kind"] }, now: number): Promise<FeedSource> {
  const source = await store.createFeedSource({
    id: newId("src", now),
    location: null,
    format: null,
    intervalMs: input.kind === "push" ? null : 60_000,
    timeoutMs: 2000,
    retries: 0,
    createdAt: now,
    authoritative: false,
    ...input,
    merchants: input.merchants ?? TEST_MERCHANTS,
  });
  if (source === null) throw new Error(`source ${input.name} exists`);
  return source;
}

/** A loopback HTTP server whose handler the test sets; records every request it gets. */
export function feedServer(handler: (request: Request) => Response | Promise<Response>) {
  const requests: Array<{ at: number; headers: Headers; url: string }> = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    idleTimeout: 30,
    fetch(request) {
      requests.push({ at: Date.now(), headers: request.headers, url: request.url });
      return handler(request);
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, requests, stop: () => server.stop(true) };
}
