// Imported first by main.ts, so it runs before the rest of the program loads.
//
// Bun's allocator (mimalloc) gives pages it no longer uses back to the kernel 10 ms after they are
// freed (`MIMALLOC_PURGE_DELAY`, read once when the process starts). A server under load allocates
// them again at once: every billed look-up then pays two or three page faults and its share of
// the `madvise` calls and TLB flushes, about a fifth of its CPU (docs/performance.md). A process
// that will serve therefore replaces itself (same pid, same arguments) with one whose allocator keeps
// its free pages for reuse. The memory a server holds then stays at its peak. An operator who sets
// the variable, to any value, keeps that value, and no process replaces itself.
import { join } from "node:path";

/** mimalloc's setting, and the value a server runs with unless the operator set one. */
export const PURGE_DELAY_VARIABLE = "MIMALLOC_PURGE_DELAY";
export const SERVER_PURGE_DELAY = "-1";

/** The arguments that start this program again: Bun's own flags and the script for a source run, none for the executable. */
export function restartArguments(argv: string[], execArgv: string[], compiled: boolean): string[] {
  return compiled ? argv.slice(2) : [...execArgv, ...argv.slice(1)];
}

/**
 * Whether this process should replace itself: it is the program's entry (not a test importing it),
 * its command line names `serve` (a word `serve` elsewhere only sets the variable for that command,
 * which changes nothing else), and the operator left the variable unset.
 */
export function shouldRestart(entry: string, argv: string[], env: NodeJS.ProcessEnv): boolean {
  const isEntry = entry === join(import.meta.dir, "..", "main.ts") || entry.startsWith("/$bunfs/");
  return isEntry && argv.slice(2).includes("serve") && env[PURGE_DELAY_VARIABLE] === undefined;
}

if (shouldRestart(Bun.main, process.argv, process.env)) {
  const args = restartArguments(process.argv, process.execArgv, Bun.main.startsWith("/$bunfs/"));
  process.execve?.(process.execPath, [process.execPath, ...args], { ...process.env, [PURGE_DELAY_VARIABLE]: SERVER_PURGE_DELAY });
}
