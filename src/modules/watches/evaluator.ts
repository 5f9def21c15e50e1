import type { Store } from "../../db/store";
import type { WatchBatchResult } from "../../db/watches/records";
import type { Clock } from "../../lib/clock";
import type { Logger } from "../../lib/logger";

/**
 * Queued changes one transaction evaluates at most: on SQLite a batch runs synchronously on the
 * serving process's thread (about 20 ms for 200 changes that each fire), so it stays short.
 */
export const WATCH_BATCH = 200;
/** Batches one tick runs at most, so a large import's changes do not hold the job for long. */
const BATCHES_PER_TICK = 50;

/**
 * The watch evaluator: a background job (like the webhook dispatcher) that turns queued offer
 * changes of watched products into billed `price.changed` events, off the import's transaction.
 * Each batch is one store transaction (Store.runWatchEvaluation); tests call `tick` directly.
 */
export class WatchEvaluator {
  private running: Promise<WatchBatchResult> | null = null;

  constructor(private readonly deps: { store: Store; clock: Clock; logger: Logger; creditCost: number; freshnessWindowMs: number; batch?: number }) {}

  /** Evaluates what is queued; a tick while one runs waits for it instead of starting another. */
  tick(): Promise<WatchBatchResult> {
    this.running ??= this.evaluate().finally(() => (this.running = null));
    return this.running;
  }

  async drain(): Promise<void> {
    await this.running?.catch(() => {});
  }

  private async evaluate(): Promise<WatchBatchResult> {
    const total: WatchBatchResult = { changes: 0, events: 0, paused: 0, resumed: 0 };
    const limit = this.deps.batch ?? WATCH_BATCH;
    for (let batch = 0; batch < BATCHES_PER_TICK; batch++) {
      const result = await this.deps.store.runWatchEvaluation({
        now: this.deps.clock.now(),
        limit,
        creditCost: this.deps.creditCost,
        freshnessWindowMs: this.deps.freshnessWindowMs,
      });
      total.changes += result.changes;
      total.events += result.events;
      total.paused += result.paused;
      total.resumed += result.resumed;
      if (result.paused > 0) this.deps.logger.info("price watches paused: insufficient credits", { watches: result.paused });
      if (result.changes < limit) break;
      // Requests waiting on the event loop go first between batches.
      await new Promise((resolve) => setImmediate(resolve));
    }
    return total;
  }
}
