// A worker that plays another process holding the SQLite write lock: its own connection, its own
// thread (so it lets go on time even while the main thread waits on the lock), `ms` milliseconds.
import { Database } from "bun:sqlite";

declare const self: Worker;

self.onmessage = async (event: MessageEvent<{ path: string; ms: number }>) => {
  const database = new Database(event.data.path);
  database.exec("PRAGMA busy_timeout = 5000");
  database.exec("BEGIN IMMEDIATE");
  postMessage("locked");
  await Bun.sleep(event.data.ms);
  database.exec("COMMIT");
  database.close();
  postMessage("released");
};
