#!/usr/bin/env bun
// The program's entry. A `serve` process first replaces itself with one whose allocator keeps the
// pages it frees (cli/server-allocator.ts); the CLI loads only after that, so a restart does not
// load the program twice.
import { restartServeKeepingFreedPages } from "./cli/server-allocator";

restartServeKeepingFreedPages();
// A promise, not a top-level await: the executable is compiled to bytecode, which has none.
void import("./cli/program").then(({ runCommandLine }) => runCommandLine());
