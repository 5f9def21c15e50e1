import { BILLED_REASON, hourStartOf, type Store, type UsageCount } from "../../db/store";
import type { Logger } from "../../lib/logger";

/**
 * Counts the unbilled outcomes of data requests per organization, key, hour and reason in memory and
 * adds them to the usage counters in one batch per flush (every second under `serve`), so a request
 * never waits on this bookkeeping. Billed look-ups are not counted here: the debit's own transaction
 * counts them, so the counters' credits always equal the ledger's usage rows. A failed flush keeps
 * its counts for the next one; a crash loses at most the last flush interval of unbilled counts.
 */
export class UsageCounterRecorder {
  private pending = new Map<string, UsageCount>();

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
  ) {}

  /** One request of `reason` by `keyId` at `at`; billed outcomes are ignored (the debit counts them). */
  record(organizationId: string, keyId: string, reason: string, at: number): void {
    if (reason === BILLED_REASON) return;
    const hourStart = hourStartOf(at);
    const id = `${organizationId}\u0000${hourStart}\u0000${keyId}\u0000${reason}`;
    const count = this.pending.get(id);
    if (count === undefined) this.pending.set(id, { organizationId, keyId, hourStart, reason, requests: 1 });
    else count.requests += 1;
  }

  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    try {
      await this.store.addUsageCounts([...batch.values()]);
    } catch (error) {
      for (const [id, count] of batch) {
        const newer = this.pending.get(id);
        if (newer === undefined) this.pending.set(id, count);
        else newer.requests += count.requests;
      }
      this.logger.warn("usage counter flush failed; will retry", { error: String(error) });
    }
  }
}
