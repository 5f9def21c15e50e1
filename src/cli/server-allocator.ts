// Bun's allocator (mimalloc) gives pages it no longer uses back to the kernel 10 ms after they are
// freed (`MIMALLOC_PURGE_DELAY`, read from the process's environment when it starts). A server under
// load allocates them again at once: every billed look-up then pays two or three page faults and
// its share of the `madvise` calls and TLB flushes (docs/performance.md). A process that will serve
// therefore replaces itself (same pid, same arguments) with one whose allocator keeps its free pages
// for reuse; the memory it holds then stays at its peak. src/main.ts calls this before the CLI
// loads. A value in the process's environment is kept as it is; one from a `.env` file, which Bun
// reads after the allocator started, is given to the allocator by the same restart.
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** mimalloc's setting, and the value a server runs with unless the operator set one. */
export const PURGE_DELAY_VARIABLE = "MIMALLOC_PURGE_DELAY";
export const SERVER_PURGE_DELAY = "-1";

/** The arguments that start this program again: Bun's own flags and the script for a source run, none for the executable. */
export function restartArguments(argv: string[], execArgv: string[], compiled: boolean): string[] {
  return compiled ? argv.slice(2) : [...execArgv, ...argv.slice(1)];
}

/** Whether `entry` (Bun.main) is the compiled executable's bundle. */
function isExecutable(entry: string): boolean {
  return entry.startsWith("/$bunfs/");
}

/**
 * Whether this process should replace itself: it is the program's entry (not a test importing the
 * CLI), its command line names `serve` (a word `serve` elsewhere only sets the variable for that
 * command, which changes nothing else), and the allocator did not start with the variable set
 * (asked last, so no other command reads its environment again).
 */
export function shouldRestart(entry: string, argv: string[], allocatorHasVariable: () => boolean): boolean {
  const isEntry = entry === join(import.meta.dir, "..", "main.ts") || isExecutable(entry);
  return isEntry && argv.slice(2).includes("serve") && !allocatorHasVariable();
}

/** Whether the environment this process started with (what the allocator read) sets `name`. */
function startedWith(name: string): boolean {
  try {
    return readFileSync("/proc/self/environ", "latin1")
      .split("\0")
      .some((entry) => entry.startsWith(`${name}=`));
  } catch {
    return process.env[name] !== undefined;
  }
}

export function restartServeKeepingFreedPages(): void {
  if (!shouldRestart(Bun.main, process.argv, () => startedWith(PURGE_DELAY_VARIABLE))) return;
  const args = restartArguments(process.argv, process.execArgv, isExecutable(Bun.main));
  const value = process.env[PURGE_DELAY_VARIABLE] ?? SERVER_PURGE_DELAY;
  try {
    process.execve?.(process.execPath, [process.execPath, ...args], { ...process.env, [PURGE_DELAY_VARIABLE]: value });
  } catch {
    // Not replaced (the executable moved, a sandbox refused exec): serve as this process.
  }
}
