// The types of stryker.config.mjs, for scripts/mutate.ts.
export declare const targets: Record<"sqlite" | "postgres", { mutate: string[]; command: string }>;
declare const options: import("@stryker-mutator/api/core").PartialStrykerOptions;
export default options;
