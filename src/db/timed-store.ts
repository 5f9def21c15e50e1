import type { Counter, Histogram } from "../lib/metrics";
import type { Store } from "./store";

/**
 * The same store with every method call timed into `duration{operation}` (and failures counted).
 * A Proxy rather than a hand-written wrapper, so store methods added later are timed too; each
 * wrapper is built once per method name, and calls run on the real store, not the proxy.
 */
export function timedStore<T extends Store>(store: T, metrics: { duration: Histogram; errors: Counter }): T {
  const wrappers = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function" || typeof property !== "string" || property === "constructor") return value;
      let wrapper = wrappers.get(property);
      if (wrapper === undefined) {
        const method = value as (...args: unknown[]) => unknown;
        const labels = [property];
        const done = (startedAt: number) => metrics.duration.observe(labels, (performance.now() - startedAt) / 1000);
        const failed = (startedAt: number) => {
          done(startedAt);
          metrics.errors.inc(labels);
        };
        wrapper = function timed(...args: unknown[]): unknown {
          const startedAt = performance.now();
          let result: unknown;
          try {
            result = method.apply(target, args);
          } catch (error) {
            failed(startedAt);
            throw error;
          }
          if (!(result instanceof Promise)) {
            done(startedAt);
            return result;
          }
          return result.then(
            (resolved) => {
              done(startedAt);
              return resolved;
            },
            (error: unknown) => {
              failed(startedAt);
              throw error;
            },
          );
        };
        wrappers.set(property, wrapper);
      }
      return wrapper;
    },
  });
}
