export interface RateLimitDecision {
  allowed: boolean;
  /** Requests left within the quota: whole tokens, at most `limit` (the draft's `r ≤ q`) even while the bucket holds a burst. */
  remaining: number;
  /** Seconds until `remaining` is back to the quota; on a refusal, the same as retryAfterSeconds (the draft's `t` beside Retry-After). */
  resetSeconds: number;
  /** Seconds to wait before a refused request can succeed (0 when allowed). */
  retryAfterSeconds: number;
}

/** A quota: `limit` requests per `windowSeconds`, named in the RateLimit headers. */
export interface RateLimitPolicy {
  readonly name: string;
  readonly limit: number;
  readonly windowSeconds: number;
}

export interface RateLimiter {
  readonly limit: number;
  readonly windowSeconds: number;
  /** The service's own policy (RATE_LIMIT), for keys without a rate limit of their own. */
  readonly policy: RateLimitPolicy;
  /**
   * Takes `tokens` (default 1: one request; a batch takes one per item) of `key`'s bucket under
   * `policy` (default: the service's).
   */
  take(key: string, now: number, policy?: RateLimitPolicy, tokens?: number): RateLimitDecision;
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
  readonly policy: RateLimitPolicy;
  private readonly buckets = new Map<string, { tokens: number; updatedAt: number; capacity: number; refillPerMs: number }>();

  constructor(
    readonly limit: number,
    windowMs: number,
  ) {
    this.windowSeconds = windowMs / 1000;
    this.policy = { name: "default", limit, windowSeconds: this.windowSeconds };
  }

  // A take larger than the bucket can ever hold (a batch of 100 under a key's limit of 10/s) is
  // admitted when the bucket is full and leaves it in debt, so over time the key still gets its rate.
  take(key: string, now: number, policy: RateLimitPolicy = this.policy, tokens = 1): RateLimitDecision {
    const capacity = 2 * policy.limit;
    const refillPerMs = policy.limit / (policy.windowSeconds * 1000);
    let bucket = this.buckets.get(key);
    if (bucket === undefined) {
      bucket = { tokens: capacity, updatedAt: now, capacity, refillPerMs };
      this.buckets.set(key, bucket);
    } else {
      // A changed policy (a key's own rate limit set or cleared) applies from now on; a lower one caps what the bucket holds.
      bucket.tokens = Math.min(capacity, bucket.tokens + (now - bucket.updatedAt) * bucket.refillPerMs);
      bucket.updatedAt = now;
      bucket.capacity = capacity;
      bucket.refillPerMs = refillPerMs;
    }
    const needed = Math.min(tokens, capacity);
    const allowed = bucket.tokens >= needed;
    if (allowed) bucket.tokens -= tokens;
    const retryAfterSeconds = allowed ? 0 : Math.max(1, Math.ceil((needed - bucket.tokens) / refillPerMs / 1000));
    return {
      allowed,
      remaining: Math.max(0, Math.min(policy.limit, Math.floor(bucket.tokens))),
      resetSeconds: allowed ? Math.ceil(Math.max(0, policy.limit - bucket.tokens) / refillPerMs / 1000) : retryAfterSeconds,
      retryAfterSeconds,
    };
  }

  /** Forgets keys whose bucket has refilled: they are indistinguishable from new ones. */
  prune(now: number): void {
    for (const [key, bucket] of this.buckets) {
      if (bucket.tokens + (now - bucket.updatedAt) * bucket.refillPerMs >= bucket.capacity) this.buckets.delete(key);
    }
  }
}

const keyPolicies = new Map<number, RateLimitPolicy>();

/** The policy of a key with a rate limit of its own: `rateLimit` requests per second, named "key". */
export function keyRateLimitPolicy(rateLimit: number): RateLimitPolicy {
  let policy = keyPolicies.get(rateLimit);
  if (policy === undefined) keyPolicies.set(rateLimit, (policy = { name: "key", limit: rateLimit, windowSeconds: 1 }));
  return policy;
}

/** The highest rate limit a key may have: the service's RATE_LIMIT in whole requests per second. */
export function maxKeyRateLimit(rateLimit: { limit: number; windowMs: number }): number {
  return Math.floor((rateLimit.limit * 1000) / rateLimit.windowMs);
}

/**
 * The IETF draft's structured fields (draft-ietf-httpapi-ratelimit-headers-09 and later): the
 * policy's quota `q` per window `w`, then `r` requests left (never above `q`) and `t` seconds until
 * they are all back, which on a 429 is Retry-After. Where the quota counts items (the batch
 * look-up: one per GTIN) rather than requests, the policy says so with the quota unit `qu="items"`.
 */
export function rateLimitHeaders(limiter: RateLimiter, decision: RateLimitDecision | null, policy: RateLimitPolicy = limiter.policy, unit: "requests" | "items" = "requests"): Record<string, string> {
  const headers: Record<string, string> = { "ratelimit-policy": `"${policy.name}";q=${policy.limit};w=${policy.windowSeconds}${unit === "items" ? ';qu="items"' : ""}` };
  if (decision !== null) headers.ratelimit = `"${policy.name}";r=${decision.remaining};t=${decision.resetSeconds}`;
  if (decision !== null && !decision.allowed) headers["retry-after"] = String(decision.retryAfterSeconds);
  return headers;
}
