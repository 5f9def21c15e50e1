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
 * that commits on its own) on, lets PostgreSQL's answers through until the ReadyForQuery that
 * follows a CommandComplete or an ErrorResponse outside a transaction block (the transaction ended:
 * committed or not), keeps that last answer from the client, cuts the connection and then refuses
 * connections for `awayMs`, as a PostgreSQL restarting would: the client cannot tell whether its
 * transaction committed. The answers before it (a prepared statement's ParseComplete and
 * descriptions, the results of statements pipelined before a COMMIT) go through.
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
      const answers = new AnswerReader();
      link.server.on("data", (answer: Buffer) => {
        const passed = answers.read(answer);
        if (passed !== null) return void link.client.write(passed);
        relay.refuseFor(awayMs);
        link.client.destroy();
        link.server.destroy();
      });
      return false;
    },
  });
  return { url: relay.url, commitsCut: () => cut, close: () => relay.close() };
}

/** Splits PostgreSQL's answers into whole messages (a type byte, then a length that counts itself) across chunks. */
class AnswerReader {
  private pending = Buffer.alloc(0);
  private completed = false;

  /** The whole messages that may pass, or null once the transaction's end is among them. */
  read(chunk: Buffer): Buffer | null {
    this.pending = Buffer.concat([this.pending, chunk]);
    let at = 0;
    while (at + 5 <= this.pending.length) {
      const end = at + 1 + this.pending.readInt32BE(at + 1);
      if (end > this.pending.length) break;
      const type = String.fromCharCode(this.pending[at]!);
      if (type === "C" || type === "E") this.completed = true;
      // ReadyForQuery's status: I (idle) or E (failed transaction) once the transaction is over, T inside it.
      if (type === "Z" && this.completed && this.pending[at + 5] !== "T".charCodeAt(0)) return null;
      at = end;
    }
    const passed = this.pending.subarray(0, at);
    this.pending = this.pending.subarray(at);
    return passed;
  }
}
