export interface RateLimitDecision {
  allowed: boolean;
  /** Requests left within the quota: whole tokens, at most `limit` (the draft's `r ≤ q`) even while the bucket holds a burst. */
  remaining: number;
  /** Seconds until `remaining` is back to the quota; on a refusal, the same as retryAfterSeconds (the draft's `t` beside Retry-After). */
  resetSeconds: number;
  /** Seconds to wait before a refused request can succeed (0 when allowed, or when this bucket alone had enough). */
  retryAfterSeconds: number;
}

/** A quota: `limit` requests per `windowSeconds`, named in the RateLimit headers. */
export interface RateLimitPolicy {
  readonly name: string;
  readonly limit: number;
  readonly windowSeconds: number;
}

/** A bucket to take from and the policy that fills it. */
export interface RateLimitCharge {
  readonly bucket: string;
  readonly policy: RateLimitPolicy;
}

/** One policy's decision on a request. */
export interface PolicyDecision extends RateLimitDecision {
  readonly policy: RateLimitPolicy;
}

export interface RateLimiter {
  readonly limit: number;
  readonly windowSeconds: number;
  /** The service's own policy (RATE_LIMIT), for keys without a rate limit of their own. */
  readonly policy: RateLimitPolicy;
  /**
   * Takes `tokens` (default 1: one request; a batch takes one per item) from the bucket of every charge, or from none when one lacks them: a request is
   * admitted by all of its policies or refused without costing any of them. One decision per charge,
   * each `allowed` as the request is; `retryAfterSeconds` is 0 for a bucket that had enough.
   */
  takeAll(charges: readonly RateLimitCharge[], now: number, tokens?: number): PolicyDecision[] | Promise<PolicyDecision[]>;
  /** Drops state that no longer matters, so memory follows the keys in use. */
  prune(now: number): void | Promise<void>;
}

export interface Bucket {
  tokens: number;
  updatedAt: number;
  capacity: number;
  refillPerMs: number;
}

/** A policy's bucket size (bursts up to twice the quota) and refill. */
export function bucketShape(policy: RateLimitPolicy): { capacity: number; refillPerMs: number } {
  return { capacity: 2 * policy.limit, refillPerMs: policy.limit / (policy.windowSeconds * 1000) };
}

/**
 * Token bucket per key, in this process's memory: `limit` tokens per window, bursts up to twice
 * that. For one process per database (SQLite); instances sharing a PostgreSQL database share their
 * buckets (SharedRateLimiter).
 */
export class MemoryRateLimiter implements RateLimiter {
  readonly windowSeconds: number;
  readonly policy: RateLimitPolicy;
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    readonly limit: number,
    windowMs: number,
  ) {
    this.windowSeconds = windowMs / 1000;
    this.policy = { name: "default", limit, windowSeconds: this.windowSeconds };
  }

  /** Takes `tokens` of `key`'s bucket under `policy` (default: the service's). */
  take(key: string, now: number, policy: RateLimitPolicy = this.policy, tokens = 1): RateLimitDecision {
    return this.takeAll([{ bucket: key, policy }], now, tokens)[0]!;
  }

  // A take larger than a bucket can ever hold (a batch of 100 under a key's limit of 10/s) is
  // admitted when the bucket is full and leaves it in debt, so over time the key still gets its rate.
  takeAll(charges: readonly RateLimitCharge[], now: number, tokens = 1): PolicyDecision[] {
    const buckets = charges.map((charge) => this.refilled(charge, now));
    const allowed = buckets.every((bucket) => bucket.tokens >= Math.min(tokens, bucket.capacity));
    if (allowed) for (const bucket of buckets) bucket.tokens -= tokens;
    return buckets.map((bucket, index) => decisionOf(bucket, charges[index]!.policy, allowed, tokens));
  }

  private refilled({ bucket: key, policy }: RateLimitCharge, now: number): Bucket {
    const { capacity, refillPerMs } = bucketShape(policy);
    let bucket = this.buckets.get(key);
    if (bucket === undefined) {
      bucket = { tokens: capacity, updatedAt: now, capacity, refillPerMs };
      this.buckets.set(key, bucket);
    } else {
      // A changed policy (a key's own rate limit set or cleared) applies from now on; a lower one caps what the bucket holds.
      bucket.tokens = Math.min(capacity, tokensAt(bucket, now));
      bucket.updatedAt = now;
      bucket.capacity = capacity;
      bucket.refillPerMs = refillPerMs;
    }
    return bucket;
  }

  /** Forgets keys whose bucket has refilled: they are indistinguishable from new ones. */
  prune(now: number): void {
    for (const [key, bucket] of this.buckets) {
      if (tokensAt(bucket, now) >= bucket.capacity) this.buckets.delete(key);
    }
  }
}

/** A clock stepped back (a time correction) refills nothing and takes nothing away: a key is never locked out for the step's length. */
function tokensAt(bucket: Bucket, now: number): number {
  return bucket.tokens + Math.max(0, now - bucket.updatedAt) * bucket.refillPerMs;
}

/** What `bucket` says of a request of `tokens` that was `allowed` (by every policy) or not. */
export function decisionOf(bucket: Bucket, policy: RateLimitPolicy, allowed: boolean, tokens: number): PolicyDecision {
  const lacking = allowed ? 0 : Math.max(0, Math.min(tokens, bucket.capacity) - bucket.tokens);
  const retryAfterSeconds = lacking > 0 ? Math.max(1, Math.ceil(lacking / bucket.refillPerMs / 1000)) : 0;
  return {
    policy,
    allowed,
    remaining: Math.max(0, Math.min(policy.limit, Math.floor(bucket.tokens))),
    resetSeconds: lacking > 0 ? retryAfterSeconds : Math.ceil(Math.max(0, policy.limit - bucket.tokens) / bucket.refillPerMs / 1000),
    retryAfterSeconds,
  };
}

/**
 * The decision of the policy closest to its limit, which the RateLimit field reports: the longest
 * wait (on a refusal, the policy that refused), then the fewest requests left, then the longest reset.
 */
export function closestToLimit(decisions: readonly PolicyDecision[]): PolicyDecision {
  const closer = (a: PolicyDecision, b: PolicyDecision) =>
    b.retryAfterSeconds - a.retryAfterSeconds || a.remaining - b.remaining || b.resetSeconds - a.resetSeconds;
  return decisions.reduce((closest, decision) => (closer(decision, closest) < 0 ? decision : closest));
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

/** The policy of all of an organization's keys together (ORG_RATE_LIMIT), named "organization". */
export function organizationRateLimitPolicy(rate: { limit: number; windowMs: number }): RateLimitPolicy {
  return { name: "organization", limit: rate.limit, windowSeconds: rate.windowMs / 1000 };
}

/**
 * The IETF draft's structured fields (draft-ietf-httpapi-ratelimit-headers-09 and later): each
 * policy's quota `q` per window `w`, as a list in RateLimit-Policy. Where the quota counts items
 * (the batch look-up: one per GTIN) rather than requests, the policy says so with `qu="items"`.
 */
export function rateLimitPolicyHeader(policies: readonly RateLimitPolicy[], unit: "requests" | "items" = "requests"): Record<string, string> {
  const quotaUnit = unit === "items" ? ';qu="items"' : "";
  return { "ratelimit-policy": policies.map((policy) => `"${policy.name}";q=${policy.limit};w=${policy.windowSeconds}${quotaUnit}`).join(", ") };
}

/**
 * RateLimit-Policy for the decisions' policies, then RateLimit for the one closest to its limit:
 * `r` requests left (never above its `q`) and `t` seconds until they are all back, which on a 429
 * is Retry-After.
 */
export function rateLimitHeaders(decisions: readonly PolicyDecision[], unit: "requests" | "items" = "requests"): Record<string, string> {
  const headers = rateLimitPolicyHeader(
    decisions.map((decision) => decision.policy),
    unit,
  );
  const reported = closestToLimit(decisions);
  headers.ratelimit = `"${reported.policy.name}";r=${reported.remaining};t=${reported.resetSeconds}`;
  if (!reported.allowed) headers["retry-after"] = String(reported.retryAfterSeconds);
  return headers;
}
