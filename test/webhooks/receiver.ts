// A webhook receiver on a loopback port, as a customer would run one: it keeps every request and
// answers with the status the test sets (or drops the connection while "down").
export interface ReceivedWebhook {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  headers: Record<string, string>;
}

export interface Receiver {
  url: string;
  received: ReceivedWebhook[];
  /** The status the next requests get (200 by default). */
  answer(status: number, body?: string): void;
  stop(): Promise<void>;
}

export function startReceiver(): Receiver {
  const received: ReceivedWebhook[] = [];
  let status = 200;
  let responseBody = "ok";
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(request) {
      const body = await request.text();
      const headers: Record<string, string> = {};
      request.headers.forEach((value, name) => {
        headers[name] = value;
      });
      received.push({
        id: headers["webhook-id"] ?? "",
        timestamp: headers["webhook-timestamp"] ?? "",
        signature: headers["webhook-signature"] ?? "",
        body,
        headers,
      });
      return new Response(responseBody, { status, headers: status >= 300 && status < 400 ? { location: "http://127.0.0.1:1/elsewhere" } : {} });
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/hooks`,
    received,
    answer(next, text = "ok") {
      status = next;
      responseBody = text;
    },
    stop: () => server.stop(true),
  };
}
