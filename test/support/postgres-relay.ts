import { connect, createServer, type Socket } from "node:net";

/**
 * A TCP relay to a PostgreSQL database, for cutting a connection at a chosen message: `fromClient`
 * answers whether a chunk from postgres.js goes on; `refuseFor` stops listening for a while.
 */
export async function startRelay(
  databaseUrl: string,
  hooks: { fromClient: (data: Buffer, link: { client: Socket; server: Socket }) => boolean },
): Promise<{ url: string; refuseFor(ms: number): void; close(): void }> {
  const url = new URL(databaseUrl);
  const [host, port] = [url.hostname, Number(url.port || 5432)];
  const relay = createServer((client: Socket) => {
    const server = connect(port, host);
    client.on("data", (data: Buffer) => hooks.fromClient(data, { client, server }) && server.write(data));
    server.on("data", (data) => client.write(data));
    for (const [socket, other] of [
      [client, server],
      [server, client],
    ] as const) {
      socket.on("error", () => other.destroy());
      socket.on("close", () => other.destroy());
    }
  });
  const listen = (relayPort: number) => new Promise<void>((listening) => relay.listen(relayPort, "127.0.0.1", listening));
  await listen(0);
  const relayPort = (relay.address() as { port: number }).port;
  let reopening: Timer | undefined;
  url.hostname = "127.0.0.1";
  url.port = String(relayPort);
  return {
    url: url.toString(),
    refuseFor(ms) {
      relay.close();
      reopening = setTimeout(() => void listen(relayPort), ms);
    },
    close() {
      clearTimeout(reopening);
      relay.close();
    },
  };
}

/**
 * A relay that passes the first COMMIT (or the first message holding one of `markers`: a statement
 * that commits on its own) on, lets PostgreSQL's answers through until the one that ends the
 * statement (a CommandComplete or an ErrorResponse, and the ReadyForQuery after it: the statement
 * ran and its transaction ended), keeps that from the client, cuts the connection and then refuses
 * connections for `awayMs`, as a PostgreSQL restarting would: the client cannot tell whether its
 * transaction committed. The answers before it (a prepared statement's ParseComplete and
 * descriptions) go through, so a statement sent in several messages does run.
 */
export async function startCommitAnswerLoss(
  databaseUrl: string,
  awayMs: number,
  markers: string[] = ["COMMIT"],
): Promise<{ url: string; commitsCut(): number; close(): void }> {
  let cut = 0;
  const relay = await startRelay(databaseUrl, {
    fromClient(data, link) {
      const text = data.toString("latin1");
      if (cut > 0 || !markers.some((marker) => text.includes(marker))) return true;
      cut++;
      link.server.write(data);
      link.server.removeAllListeners("data");
      let ended = false;
      link.server.on("data", (answer: Buffer) => {
        const types = messageTypes(answer);
        ended ||= types.includes("C") || types.includes("E");
        if (!(ended && types.includes("Z"))) return void link.client.write(answer);
        relay.refuseFor(awayMs);
        link.client.destroy();
        link.server.destroy();
      });
      return false;
    },
  });
  return { url: relay.url, commitsCut: () => cut, close: () => relay.close() };
}

/** The types of the backend messages a chunk holds (each a type byte and a length that counts itself). */
function messageTypes(chunk: Buffer): string[] {
  const types: string[] = [];
  for (let at = 0; at + 5 <= chunk.length; at += 1 + chunk.readInt32BE(at + 1)) types.push(String.fromCharCode(chunk[at]!));
  return types;
}
