import type { Logger } from "../../lib/logger";
import type { Store } from "../../db/store";

/**
 * Collects `lastUsedAt` per key in memory and writes them in one batch per interval, so a data
 * request never waits on this bookkeeping. Each instance writes its own view; the store keeps the
 * latest timestamp, so several instances converge.
 */
export class KeyUsageRecorder {
  private pending = new Map<string, number>();

  constructor(
    private readonly store: Store,
    private readonly logger: Logger,
  ) {}

  record(keyId: string, at: number): void {
    this.pending.set(keyId, at);
  }

  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    try {
      await this.store.touchApiKeys(batch);
    } catch (error) {
      for (const [id, at] of batch) if (!this.pending.has(id)) this.pending.set(id, at);
      this.logger.warn("lastUsedAt flush failed; will retry", { error: String(error) });
    }
  }
}
