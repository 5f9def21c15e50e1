import { describe, expect, test } from "bun:test";
import { dirname, join } from "node:path";

// postgres.js keeps its pool's connections (open, busy, full) and each connection's queries in flight
// in one small queue type. Unpatched (3.4.9), a queue that never empties keeps a slot for every item
// ever taken from it, and `remove` scans them all: with every connection busy, each query moves a
// connection through `busy` (shift, remove, push), so each query cost more than the one before
// (10 → 47 µs of CPU per query after 320 000). patches/postgres+3.4.9.patch (applied by
// patch-package at install) drops the taken slots; these tests check the installed copy, the one
// the service and the executable load.
interface DriverQueue<T> {
  readonly length: number;
  push(item: T): T;
  shift(): T | undefined;
  remove(item: T | undefined): T | undefined | null;
}

async function driverQueue<T>(): Promise<DriverQueue<T>> {
  const entry = Bun.resolveSync("postgres", import.meta.dir);
  const { default: Queue } = (await import(join(dirname(entry), "queue.js"))) as { default: () => DriverQueue<T> };
  return Queue();
}

describe("postgres.js's connection queue under steady load", () => {
  test("keeps no slot per item once taken, however long it never empties", async () => {
    const busy = await driverQueue<{ id: number }>();
    const connections = [{ id: 1 }, { id: 2 }, { id: 3 }, { id: 4 }];
    for (const connection of connections) busy.push(connection);
    // What the pool does for each query while all four connections are busy.
    for (let query = 0; query < 100_000; query++) {
      const connection = busy.shift()!;
      busy.remove(connection);
      busy.push(connection);
    }
    expect(busy.length).toBe(4);
    // The slots left behind are undefined entries; count them by removing them (the queue is spent after this).
    let leftBehind = 0;
    while (busy.remove(undefined) !== null) leftBehind++;
    expect(leftBehind).toBeLessThan(64);
  });

  test("still hands items out first in, first out across the compactions", async () => {
    const queue = await driverQueue<number>();
    const taken: number[] = [];
    let next = 0;
    for (let i = 0; i < 8; i++) queue.push(next++);
    for (let round = 0; round < 1_000; round++) {
      taken.push(queue.shift()!);
      queue.push(next++);
      if (round % 3 === 0) queue.push(next++);
      if (round % 5 === 0) taken.push(queue.shift()!);
    }
    while (queue.length > 0) taken.push(queue.shift()!);
    expect(taken).toEqual(Array.from({ length: next }, (_, i) => i));
  });
});
