import { describe, expect, test } from "bun:test";
import { MemoryRateLimiter, rateLimitHeaders, type RateLimitPolicy } from "./rate-limit";

const one = (limiter: MemoryRateLimiter) => (key: string, now: number) => limiter.takeAll([{ bucket: key, policy: limiter.policy }], now);

describe("MemoryRateLimiter", () => {
  test("a fresh key can burst to twice the limit, then is refused until tokens refill", () => {
    const limiter = new MemoryRateLimiter(5, 1000);
    const decisions = Array.from({ length: 11 }, () => limiter.take("k", 0));
    expect(decisions.filter((d) => d.allowed)).toHaveLength(10);
    const refused = decisions[10]!;
    expect(refused).toMatchObject({ allowed: false, remaining: 0 });
    expect(refused.retryAfterSeconds).toBe(1);
    expect(limiter.take("k", 199).allowed).toBe(false);
    expect(limiter.take("k", 400).allowed).toBe(true);
  });

  test("a clock stepped back neither locks a key out nor refills it, and refilling resumes from the earlier time", () => {
    const limiter = new MemoryRateLimiter(5, 1000);
    const hour = 3_600_000;
    for (let i = 0; i < 9; i++) limiter.take("k", 10 * hour);
    expect(limiter.take("k", 10 * hour - hour)).toMatchObject({ allowed: true, remaining: 0 });
    expect(limiter.take("k", 10 * hour - hour).allowed).toBe(false);
    expect(limiter.take("k", 10 * hour - hour + 200).allowed).toBe(true);
    limiter.prune(10 * hour - 2 * hour);
    expect(limiter.take("k", 10 * hour - hour + 200).allowed).toBe(false);
  });

  test("keys are limited independently", () => {
    const limiter = new MemoryRateLimiter(1, 1000);
    limiter.take("a", 0);
    limiter.take("a", 0);
    expect(limiter.take("a", 0).allowed).toBe(false);
    expect(limiter.take("b", 0).allowed).toBe(true);
  });

  test("a per-minute limit reports the seconds to wait", () => {
    const limiter = new MemoryRateLimiter(60, 60_000);
    for (let i = 0; i < 120; i++) limiter.take("k", 0);
    const refused = one(limiter)("k", 0);
    expect(refused[0]!.allowed).toBe(false);
    expect(refused[0]!.retryAfterSeconds).toBe(1);
    expect(rateLimitHeaders(refused)).toEqual({ "ratelimit-policy": '"default";q=60;w=60', ratelimit: '"default";r=0;t=1', "retry-after": "1" });
  });

  test("the header never reports more requests left than the quota, even with a burst in the bucket, and t names when they are all back", () => {
    const limiter = new MemoryRateLimiter(100, 1000);
    const first = one(limiter)("k", 0);
    expect(rateLimitHeaders(first)).toEqual({ "ratelimit-policy": '"default";q=100;w=1', ratelimit: '"default";r=100;t=0' });
    for (let i = 0; i < 150; i++) limiter.take("k", 0);
    expect(rateLimitHeaders(one(limiter)("k", 0)).ratelimit).toBe('"default";r=48;t=1');
  });

  test("a refusal's t is its Retry-After", () => {
    const limiter = new MemoryRateLimiter(100, 1000);
    for (let i = 0; i < 200; i++) limiter.take("k", 0);
    const headers = rateLimitHeaders(one(limiter)("k", 0));
    expect(headers).toEqual({ "ratelimit-policy": '"default";q=100;w=1', ratelimit: '"default";r=0;t=1', "retry-after": "1" });
  });

  test("prune forgets only keys whose bucket is full again", () => {
    const limiter = new MemoryRateLimiter(1, 1000);
    limiter.take("old", 0);
    limiter.take("new", 5000);
    limiter.prune(5000);
    expect(limiter.take("new", 5000).remaining).toBe(0);
    expect(limiter.take("old", 5000).remaining).toBe(1);
  });

  test("takeAll admits a request only when every bucket has the tokens, and a refusal costs none of them", () => {
    const limiter = new MemoryRateLimiter(5, 1000);
    const organization: RateLimitPolicy = { name: "organization", limit: 2, windowSeconds: 1 };
    const charges = (key: string) => [
      { bucket: key, policy: limiter.policy },
      { bucket: "org", policy: organization },
    ];
    for (let i = 0; i < 4; i++) expect(limiter.takeAll(charges(`k${i}`), 0).every((decision) => decision.allowed)).toBe(true);
    const refused = limiter.takeAll(charges("k0"), 0);
    expect(refused.map((decision) => [decision.policy.name, decision.allowed, decision.retryAfterSeconds])).toEqual([
      ["default", false, 0],
      ["organization", false, 1],
    ]);
    // k0 spent one token, not two: the refusal cost it nothing.
    expect(limiter.take("k0", 0).remaining).toBe(5);
  });

  test("the RateLimit field reports the policy that refused, else the one with the fewest requests left", () => {
    const limiter = new MemoryRateLimiter(5, 1000);
    const organization: RateLimitPolicy = { name: "organization", limit: 3, windowSeconds: 1 };
    const take = () =>
      limiter.takeAll(
        [
          { bucket: "k", policy: limiter.policy },
          { bucket: "org", policy: organization },
        ],
        0,
      );
    expect(rateLimitHeaders(take())).toEqual({ "ratelimit-policy": '"default";q=5;w=1, "organization";q=3;w=1', ratelimit: '"organization";r=3;t=0' });
    for (let i = 0; i < 4; i++) take();
    expect(rateLimitHeaders(take(), "items")).toEqual({
      "ratelimit-policy": '"default";q=5;w=1;qu="items", "organization";q=3;w=1;qu="items"',
      ratelimit: '"organization";r=0;t=1',
    });
    expect(rateLimitHeaders(take())).toMatchObject({ ratelimit: '"organization";r=0;t=1', "retry-after": "1" });
  });
});
