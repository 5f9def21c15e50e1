// A worker that plays another process holding the SQLite write lock: its own connection, its own
// thread (so it lets go on time even while the main thread waits on the lock), `ms` milliseconds.
import { Database } from "bun:sqlite";

declare const self: Worker;

self.onmessage = async (event: MessageEvent<{ path: string; ms: number }>) => {
  const database = new Database(event.data.path);
  try {
    database.exec("PRAGMA busy_timeout = 5000");
    database.exec("BEGIN IMMEDIATE");
    postMessage("locked");
    await Bun.sleep(event.data.ms);
    database.exec("COMMIT");
  } catch (error) {
    // Not taken within 5 s (the instances' writes held it): say so, and the fault is not injected.
    postMessage(`failed: ${error}`);
  } finally {
    database.close();
    postMessage("released");
  }
};
