export interface RateLimitDecision {
  allowed: boolean;
  /** Requests left right now (whole tokens). */
  remaining: number;
  /** Seconds until the bucket is full again. */
  resetSeconds: number;
  /** Seconds to wait before a refused request can succeed (0 when allowed). */
  retryAfterSeconds: number;
}

export interface RateLimiter {
  readonly limit: number;
  readonly windowSeconds: number;
  take(key: string, now: number): RateLimitDecision;
  /** Drops state that no longer matters, so memory follows the keys in use. */
  prune(now: number): void;
}

/**
 * Token bucket per key, in this process's memory: `limit` tokens per window, bursts up to twice
 * that. With several instances each one limits on its own, so a key can reach N × the limit
 * behind a load balancer spreading it over N instances.
 */
export class MemoryRateLimiter implements RateLimiter {
  readonly windowSeconds: number;
  private readonly capacity: number;
  private readonly refillPerMs: number;
  private readonly buckets = new Map<string, { tokens: number; updatedAt: number }>();

  constructor(
    readonly limit: number,
    windowMs: number,
  ) {
    this.windowSeconds = windowMs / 1000;
    this.capacity = 2 * limit;
    this.refillPerMs = limit / windowMs;
  }

  take(key: string, now: number): RateLimitDecision {
    let bucket = this.buckets.get(key);
    if (bucket === undefined) {
      bucket = { tokens: this.capacity, updatedAt: now };
      this.buckets.set(key, bucket);
    } else {
      bucket.tokens = Math.min(this.capacity, bucket.tokens + (now - bucket.updatedAt) * this.refillPerMs);
      bucket.updatedAt = now;
    }
    const allowed = bucket.tokens >= 1;
    if (allowed) bucket.tokens -= 1;
    return {
      allowed,
      remaining: Math.floor(bucket.tokens),
      resetSeconds: Math.ceil((this.capacity - bucket.tokens) / this.refillPerMs / 1000),
      retryAfterSeconds: allowed ? 0 : Math.max(1, Math.ceil((1 - bucket.tokens) / this.refillPerMs / 1000)),
    };
  }

  /** Forgets keys whose bucket has refilled: they are indistinguishable from new ones. */
  prune(now: number): void {
    for (const [key, bucket] of this.buckets) {
      if (bucket.tokens + (now - bucket.updatedAt) * this.refillPerMs >= this.capacity) this.buckets.delete(key);
    }
  }
}

/** The IETF draft's structured fields (draft-ietf-httpapi-ratelimit-headers). */
export function rateLimitHeaders(limiter: RateLimiter, decision: RateLimitDecision | null): Record<string, string> {
  const headers: Record<string, string> = { "ratelimit-policy": `"default";q=${limiter.limit};w=${limiter.windowSeconds}` };
  if (decision !== null) headers.ratelimit = `"default";r=${decision.remaining};t=${decision.resetSeconds}`;
  if (decision !== null && !decision.allowed) headers["retry-after"] = String(decision.retryAfterSeconds);
  return headers;
}
