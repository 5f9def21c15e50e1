// Preloaded for every test run (bunfig.toml): what is made once for the whole run (the end-to-end
// harness's copy of the executable, the PostgreSQL schemas test stores leave for reuse) is removed
// after its last test file. `bun test` emits no process "exit" event, so a handler there never ran
// and each run left a copy behind.
import { afterAll } from "bun:test";
import { rmSync } from "node:fs";
import { dropSparedSchemas, spareClosedSchemas } from "./schemas";

const directories: string[] = [];

export function removeAfterTheRun(directory: string): void {
  directories.push(directory);
}

spareClosedSchemas();

afterAll(async () => {
  for (const directory of directories.splice(0)) rmSync(directory, { recursive: true, force: true });
  await dropSparedSchemas();
});
