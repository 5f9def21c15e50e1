import type { FeedRun, FeedSource, FeedRunTrigger } from "../../db/feeds/records";
import type { Store } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { newId } from "../../lib/ids";
import type { Logger } from "../../lib/logger";
import { type PullOptions, pullURLSource, scanDirectorySource } from "./pull";

/** Sources one tick claims at most; the rest are due at the next tick. */
const CLAIM_LIMIT = 4;
/** Slack on top of a run's worst case (every attempt timing out, every back-off) before its lease lapses. */
const LEASE_MARGIN_MS = 60_000;
/** Most retries a source may declare (`feeds add --retries`). */
export const MAX_FEED_RETRIES = 5;

export interface FeedSchedulerOptions extends PullOptions {
  store: Store;
  clock: Clock;
  logger: Logger;
  freshnessWindowMs: number;
  /** Names this instance's leases; unique per process. */
  owner?: string;
  /** Called with each finished run (metrics). */
  onRun?: (source: FeedSource, run: FeedRun) => void;
}

/**
 * Runs the scheduled sources (URLs and directories) of one `serve` instance. Each tick claims the
 * due sources through the store — a lease dated by the store's clock, and the next run moved one
 * interval on, in one statement — so with several instances on one PostgreSQL database each period
 * of a source runs once, on whichever instance claimed it. Runs go on in the background; the next
 * tick does not wait for them.
 */
export class FeedScheduler {
  readonly owner: string;
  private readonly running = new Set<Promise<unknown>>();
  private claiming: Promise<{ runs: Promise<FeedRun[]> }> | null = null;
  /** Per source, the lastSuccessAt a staleness warning was already logged for (one warning per silence). */
  private readonly warned = new Map<string, number | null>();

  constructor(private readonly options: FeedSchedulerOptions) {
    this.owner = options.owner ?? `${process.pid}-${newId("run").slice(4)}`;
  }

  /** What a lease adds to a run's (retries + 1) × timeout: every back-off pause at its longest, and slack. */
  private leaseMarginMs(): number {
    return Math.ceil(this.options.retryBaseMs * (2 ** (MAX_FEED_RETRIES + 1) - 1) * 1.2) + LEASE_MARGIN_MS;
  }

  /** The lease a run of `source` takes: long enough for every attempt to time out and back off. */
  leaseMs(source: FeedSource): number {
    return (source.retries + 1) * source.timeoutMs + this.leaseMarginMs();
  }

  /**
   * Claims the due sources and starts their runs; resolves with those runs once they have finished.
   * The next tick can claim as soon as this one has claimed: a slow source never holds up the others.
   */
  tick(): Promise<FeedRun[]> {
    // A tick that is still claiming is not doubled; runs started by earlier ticks go on regardless.
    this.claiming ??= this.claim().finally(() => {
      this.claiming = null;
    });
    return this.claiming.then(({ runs }) => runs);
  }

  /** The claimed sources' runs, started; wrapped so that waiting for the claim does not wait for them. */
  private async claim(): Promise<{ runs: Promise<FeedRun[]> }> {
    const { store, clock } = this.options;
    const claimed = await store.claimDueFeedSources({ owner: this.owner, now: clock.now(), leaseMarginMs: this.leaseMarginMs(), limit: CLAIM_LIMIT });
    const runs = claimed.map((source) => this.track(this.runSource(source, "schedule", this.owner)));
    return { runs: Promise.all(runs).then((all) => all.flat()) };
  }

  /** Runs one source now (operator's `feeds run`), under a lease so it never overlaps a scheduled run. */
  async runNow(source: FeedSource): Promise<FeedRun[] | null> {
    const { store, clock } = this.options;
    const leased = await store.claimFeedSource({ id: source.id, owner: this.owner, now: clock.now(), leaseMs: this.leaseMs(source) });
    if (leased === null) return null;
    return this.track(this.runSource(leased, "manual", this.owner));
  }

  private track<T>(work: Promise<T>): Promise<T> {
    this.running.add(work);
    void work.finally(() => this.running.delete(work)).catch(() => undefined);
    return work;
  }

  private async runSource(source: FeedSource, trigger: FeedRunTrigger, leaseOwner: string): Promise<FeedRun[]> {
    const { store, clock, logger } = this.options;
    try {
      const runs =
        source.kind === "url"
          ? [await pullURLSource(store, clock, source, { trigger, leaseOwner }, this.options)]
          : source.kind === "directory"
            ? await scanDirectorySource(store, clock, source, { trigger, leaseOwner, leaseMs: this.leaseMs(source) }, this.options)
            : [];
      for (const run of runs) {
        this.options.onRun?.(source, run);
        const fields = {
          sourceId: source.id,
          source: source.name,
          runId: run.id,
          status: run.status,
          recordsRead: run.recordsRead,
          offers: run.offers,
          rejected: run.rejectedCount,
          durationMs: run.durationMs,
        };
        if (run.status === "failed") logger.warn("feed run failed", { ...fields, error: run.error });
        else logger.info("feed run", fields);
      }
      return runs;
    } catch (error) {
      // A store failure while recording: the lease lapses on its own and the next period runs.
      logger.error("feed run could not be recorded", { sourceId: source.id, source: source.name, error: String(error) });
      return [];
    }
  }

  /**
   * Logs a warning for each source that has not delivered (no successful run) within the freshness
   * window: once per silence, again only after it delivered and went quiet again.
   */
  async warnAboutSilentSources(): Promise<string[]> {
    const { store, clock, logger, freshnessWindowMs } = this.options;
    const now = clock.now();
    const silent: string[] = [];
    for (const source of await store.listFeedSources()) {
      const since = source.lastSuccessAt ?? source.createdAt;
      if (now - since <= freshnessWindowMs) continue;
      silent.push(source.name);
      if (this.warned.has(source.id) && this.warned.get(source.id) === source.lastSuccessAt) continue;
      this.warned.set(source.id, source.lastSuccessAt);
      logger.warn("feed source has not delivered within the freshness window", {
        sourceId: source.id,
        source: source.name,
        lastSuccessAt: source.lastSuccessAt === null ? null : new Date(source.lastSuccessAt).toISOString(),
        freshnessWindowMs,
      });
    }
    return silent;
  }

  /** Waits for the runs in progress (shutdown). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }
}
