// The test context and its fixtures live in test/support/context.ts; this path re-exports them for
// test/simulation/, which still imports "../helpers".
export * from "./support/context";
