import type { KeyCredential } from "../../db/store";
import type { Services } from "../../services";
import { Problem } from "../../http/problem";
import {
  closestToLimit,
  keyRateLimitPolicy,
  organizationRateLimitPolicy,
  rateLimitHeaders,
  rateLimitPolicyHeader,
  type RateLimiter,
  type RateLimitPolicy,
} from "../../http/rate-limit";
import type { Texts } from "../../http/validation";
import type { Clock } from "../../lib/clock";
import type { Lookup } from "./parse";

type Unit = "requests" | "items";

/** The price routes' rate limits, with what can be computed once: the organization's policy and the policy headers. */
export interface PriceRateLimits {
  rateLimiter: RateLimiter;
  clock: Clock;
  organizationPolicy: RateLimitPolicy;
  /** RateLimit-Policy of every answer (the 401 included): a single look-up counts requests, a batch items. */
  policyHeaders: Record<Unit, Record<string, string>>;
}

export function priceRateLimits(services: Services): PriceRateLimits {
  const { rateLimiter, clock, config } = services;
  const organizationPolicy = organizationRateLimitPolicy(config.organizationRateLimit);
  const policies = [rateLimiter.policy, organizationPolicy];
  return {
    rateLimiter,
    clock,
    organizationPolicy,
    policyHeaders: { requests: rateLimitPolicyHeader(policies), items: rateLimitPolicyHeader(policies, "items") },
  };
}

/** What admission needs of a request: how many items it counts and whether it is a batch. */
export type Admission = Pick<Lookup, "kind" | "items">;

function unitOf(lookup: Admission): Unit {
  return lookup.kind === "batch" ? "items" : "requests";
}

/**
 * Takes the request's items from the bucket of the key's rotation line (under its own rate limit,
 * else the service's) and from the organization's, or from neither: returns the RateLimit headers
 * (also set on the answer), or throws 429 when a bucket lacks them.
 */
export async function admit(
  limits: PriceRateLimits,
  key: KeyCredential,
  lookup: Admission,
  set: { headers: Record<string, unknown> },
): Promise<Record<string, string>> {
  const { rateLimiter, clock, organizationPolicy } = limits;
  const keyPolicy = key.rateLimit === null ? rateLimiter.policy : keyRateLimitPolicy(key.rateLimit);
  // Line ids start "key_" and organization ids "org_": the two never share a bucket.
  const charges = [
    { bucket: key.lineId, policy: keyPolicy },
    { bucket: key.organizationId, policy: organizationPolicy },
  ];
  const decisions = await rateLimiter.takeAll(charges, clock.now(), lookup.items);
  const unit = unitOf(lookup);
  const limitHeaders = rateLimitHeaders(decisions, unit);
  Object.assign(set.headers, limitHeaders);
  if (decisions[0]!.allowed) return limitHeaders;
  const { policy, retryAfterSeconds } = closestToLimit(decisions);
  const detail = rateLimited({ policy, retryAfterSeconds, items: lookup.items, unit, organizationWide: policy === organizationPolicy });
  throw new Problem("rate-limited", { detail, extensions: { meta: { reason: "rate-limited" } }, headers: limitHeaders });
}

/** The 429's detail: the policy that refused, its unit, and when to retry. */
function rateLimited(refusal: { policy: RateLimitPolicy; retryAfterSeconds: number; items: number; unit: Unit; organizationWide: boolean }): Texts {
  const { policy, retryAfterSeconds, items } = refusal;
  const what = refusal.unit === "items" ? { en: "GTINs", fr: "GTIN" } : { en: "requests", fr: "requêtes" };
  const whose = refusal.organizationWide
    ? { en: " for all of the organization's keys together", fr: " pour toutes les clés de l'organisation ensemble" }
    : { en: "", fr: "" };
  const asked = refusal.unit === "items" ? { en: ` (this batch has ${items})`, fr: ` (ce lot en compte ${items})` } : { en: "", fr: "" };
  return {
    en: `Rate limit of ${policy.limit} ${what.en} per ${policy.windowSeconds} s${whose.en} exceeded${asked.en}; retry in ${retryAfterSeconds} s.`,
    fr: `Limite de ${policy.limit} ${what.fr} par ${policy.windowSeconds} s${whose.fr} dépassée${asked.fr} ; réessayez dans ${retryAfterSeconds} s.`,
  };
}
