// Preloaded for every test run (bunfig.toml): what is made once for the whole run (the end-to-end
// harness's copy of the executable, PostgreSQL schemas kept for reuse) is removed after its last test
// file. `bun test` emits no process "exit" event, so a handler there never ran and each run left
// its copies behind.
import { afterAll } from "bun:test";
import { rmSync } from "node:fs";

const tasks: Array<() => Promise<void> | void> = [];

/** Runs `task` once, after the run's last test file. */
export function afterTheRun(task: () => Promise<void> | void): void {
  tasks.push(task);
}

export function removeAfterTheRun(directory: string): void {
  afterTheRun(() => rmSync(directory, { recursive: true, force: true }));
}

afterAll(async () => {
  for (const task of tasks.splice(0)) await task();
});
