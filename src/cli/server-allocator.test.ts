import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { restartArguments, shouldRestart } from "./server-allocator";

const MAIN = join(import.meta.dir, "..", "main.ts");

describe("restartArguments", () => {
  test("a source run keeps Bun's flags and its script", () => {
    expect(restartArguments(["/bin/bun", MAIN, "serve", "--port", "1"], ["--preload", "x.ts"], false)).toEqual([
      "--preload",
      "x.ts",
      MAIN,
      "serve",
      "--port",
      "1",
    ]);
  });
  test("the executable keeps only its own arguments", () => {
    expect(restartArguments(["bun", "/$bunfs/root/price-service", "serve", "--dev"], [], true)).toEqual(["serve", "--dev"]);
  });
});

describe("shouldRestart", () => {
  test("the entry serving with the variable unset", () => {
    expect(shouldRestart(MAIN, ["bun", MAIN, "serve"], () => false)).toBe(true);
    expect(shouldRestart("/$bunfs/root/price-service", ["bun", "/$bunfs/root/price-service", "--port", "8", "serve"], () => false)).toBe(true);
  });
  test("not another command, not a set variable, not a module importing the CLI", () => {
    expect(shouldRestart(MAIN, ["bun", MAIN, "migrate"], () => false)).toBe(false);
    expect(shouldRestart(MAIN, ["bun", MAIN, "serve"], () => true)).toBe(false);
    expect(shouldRestart("/repo/test/cli/cli.test.ts", ["bun", "test", "serve"], () => false)).toBe(false);
  });
});
