// A load balancer for tests: every request to its port goes to the next of its back ends in turn,
// as they are, body streamed and compressed answers left compressed, redirects passed back to the
// client. Several instances behind it answer as one service would.
import type { Server } from "bun";

export interface RoundRobin {
  url: string;
  /** Requests each back end has received, in the back ends' order. */
  served: number[];
  stop(): Promise<void>;
}

export function roundRobin(port: number, backends: string[]): RoundRobin {
  const served = backends.map(() => 0);
  let next = 0;
  const server: Server<undefined> = Bun.serve({
    port,
    hostname: "127.0.0.1",
    idleTimeout: 0,
    async fetch(request) {
      const index = next++ % backends.length;
      served[index]!++;
      const { pathname, search } = new URL(request.url);
      return fetch(`${backends[index]}${pathname}${search}`, {
        method: request.method,
        headers: request.headers,
        body: request.body,
        redirect: "manual",
        decompress: false,
      });
    },
  });
  return { url: `http://127.0.0.1:${server.port}`, served, stop: () => server.stop(true) };
}
