import type { SharedRateBuckets } from "../db/store";
import type { Logger } from "../lib/logger";
import { bucketShape, decisionOf, MemoryRateLimiter, type PolicyDecision, type RateLimitCharge, type RateLimiter, type RateLimitPolicy } from "./rate-limit";

/** Tokens leased at a time: this share of a policy's quota (a key at 100/s leases 5 per statement). */
const SLICE_OF_QUOTA = 1 / 20;
/** Leases a request may take when concurrent requests on this instance use up what it leased. */
const LEASE_ATTEMPTS = 3;

/** This instance's side of a shared bucket. */
interface LocalBucket {
  policy: RateLimitPolicy;
  capacity: number;
  refillPerMs: number;
  /** Tokens leased from the shared bucket and not used yet. */
  leased: number;
  /** The shared bucket's tokens after this instance's last lease, and when (this instance's clock). */
  shared: number;
  sharedAt: number;
  /** The last lease lacked this bucket: while `shared`, refilled since, is short of a request's need, it is refused here without asking again. */
  refused: boolean;
  usedAt: number;
}

/**
 * Token buckets shared by every instance on one PostgreSQL database (rate_limit_buckets, through
 * `lease_rate_tokens`), so a key gets its rate however a load balancer spreads its requests. An
 * instance leases tokens in slices (a twentieth of the quota) and spends them in memory: one
 * statement per slice, not per request. The instances together never take more than the shared
 * bucket gives; what a slice leaves unused on an idle instance goes back when it is pruned, and a
 * dead instance's slice is lost (at most a twentieth of a quota, never more admitted).
 * While the database cannot be reached, each instance limits on its own (MemoryRateLimiter).
 */
export class SharedRateLimiter implements RateLimiter {
  readonly windowSeconds: number;
  readonly policy: RateLimitPolicy;
  private readonly locals = new Map<string, LocalBucket>();
  private readonly fallback: MemoryRateLimiter;
  private unreachable = false;

  constructor(
    readonly limit: number,
    windowMs: number,
    private readonly buckets: SharedRateBuckets,
    private readonly logger: Logger,
  ) {
    this.fallback = new MemoryRateLimiter(limit, windowMs);
    this.windowSeconds = this.fallback.windowSeconds;
    this.policy = this.fallback.policy;
  }

  async takeAll(charges: readonly RateLimitCharge[], now: number, tokens = 1): Promise<PolicyDecision[]> {
    const locals = charges.map((charge) => this.local(charge, now));
    const refusing = () => locals.filter((local) => this.waitMs(local, tokens, now) > 0);
    for (let attempt = 0; attempt < LEASE_ATTEMPTS; attempt++) {
      const lacking = charges.flatMap((charge, index) => (locals[index]!.leased < tokens ? [{ bucket: charge.bucket, local: locals[index]! }] : []));
      if (lacking.length === 0 || refusing().length > 0) break;
      try {
        await this.lease(lacking, tokens, now);
      } catch (error) {
        return this.limitAlone(charges, now, tokens, error);
      }
    }
    this.reachable();
    const allowed = locals.every((local) => local.leased >= tokens);
    // Granted every time, and every time spent by this instance's concurrent requests first: refused as if the shared bucket lacked.
    if (!allowed && refusing().length === 0) for (const local of locals) if (local.leased < tokens) local.refused = true;
    if (allowed) {
      for (const local of locals) {
        local.leased -= tokens;
        local.usedAt = now;
      }
    }
    return locals.map((local, index) => this.decision(local, charges[index]!.policy, allowed, tokens, now));
  }

  /** Gives back what idle buckets leased (they then start afresh), and prunes the fallback's buckets. */
  async prune(now: number): Promise<void> {
    this.fallback.prune(now);
    const idle = [...this.locals].filter(([, local]) => now - local.usedAt >= local.policy.windowSeconds * 1000);
    for (const [bucket] of idle) this.locals.delete(bucket);
    const returns = idle.filter(([, local]) => local.leased > 0).map(([bucket, local]) => ({ bucket, amount: local.leased }));
    await this.buckets.giveBack(returns);
  }

  private local({ bucket, policy }: RateLimitCharge, now: number): LocalBucket {
    let local = this.locals.get(bucket);
    if (local === undefined) {
      local = { policy, ...bucketShape(policy), leased: 0, shared: 0, sharedAt: now, refused: false, usedAt: now };
      this.locals.set(bucket, local);
    } else if (local.policy !== policy) {
      // A key's own rate limit set, changed or cleared: the shared bucket takes the new shape at the next lease.
      Object.assign(local, { policy, ...bucketShape(policy) });
    }
    return local;
  }

  /** One statement for the charges this instance lacks tokens for: a slice each, or nothing for any. */
  private async lease(lacking: ReadonlyArray<{ bucket: string; local: LocalBucket }>, tokens: number, now: number): Promise<void> {
    const grants = await this.buckets.lease(
      lacking.map(({ bucket, local }) => {
        const need = tokens - local.leased;
        return { bucket, capacity: local.capacity, refillPerMs: local.refillPerMs, need, ask: Math.max(need, Math.ceil(local.policy.limit * SLICE_OF_QUOTA)) };
      }),
      now,
    );
    const byBucket = new Map(lacking.map(({ bucket, local }) => [bucket, local]));
    for (const grant of grants) {
      const local = byBucket.get(grant.bucket)!;
      local.leased += grant.granted;
      local.shared = grant.tokensLeft;
      local.sharedAt = now;
      local.refused = grant.granted === 0 && grant.tokensLeft < Math.min(tokens - local.leased, local.capacity);
    }
  }

  /**
   * What the RateLimit fields report: the tokens this instance holds and the shared bucket held at its
   * last lease, refilled since; a bucket that refused waits until it can give the request's need.
   */
  private decision(local: LocalBucket, policy: RateLimitPolicy, allowed: boolean, tokens: number, now: number): PolicyDecision {
    const held = Math.min(local.capacity, local.leased + this.sharedAt(local, now));
    const decision = decisionOf({ tokens: held, updatedAt: now, capacity: local.capacity, refillPerMs: local.refillPerMs }, policy, allowed, tokens);
    if (allowed || !local.refused || local.leased >= tokens) return decision;
    const retryAfterSeconds = Math.max(1, Math.ceil(this.waitMs(local, tokens, now) / 1000));
    return { ...decision, resetSeconds: retryAfterSeconds, retryAfterSeconds };
  }

  /** The shared bucket's tokens as this instance last saw them, refilled since. */
  private sharedAt(local: LocalBucket, now: number): number {
    return Math.min(local.capacity, local.shared + Math.max(0, now - local.sharedAt) * local.refillPerMs);
  }

  /** How long a bucket whose last lease lacked stays short of what this instance needs for `tokens` (0: ask the shared bucket). */
  private waitMs(local: LocalBucket, tokens: number, now: number): number {
    if (!local.refused || local.leased >= tokens) return 0;
    return Math.max(0, (Math.min(tokens - local.leased, local.capacity) - this.sharedAt(local, now)) / local.refillPerMs);
  }

  private limitAlone(charges: readonly RateLimitCharge[], now: number, tokens: number, error: unknown): PolicyDecision[] {
    if (!this.unreachable)
      this.logger.warn("shared rate limits unreachable: each instance limits on its own until the database answers", { error: String(error) });
    this.unreachable = true;
    return this.fallback.takeAll(charges, now, tokens);
  }

  private reachable(): void {
    if (this.unreachable) this.logger.info("shared rate limits reachable again");
    this.unreachable = false;
  }
}
