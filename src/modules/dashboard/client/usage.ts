// The 30-day usage chart's data: the server's daily usage report (GET /customer/billing/usage),
// which counts every request and every credit of the organization, whatever its volume.

export interface DailyUsage {
  /** UTC midnight of the day. */
  day: Date;
  credits: number;
  /** Data requests answered that day, billed or not. */
  requests: number;
}

/** UTC midnight `days - 1` days before `now`: the first day of a window of `days` UTC days ending today. */
export function windowStart(now: Date, days: number): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - (days - 1)));
}

/** One entry per period of the report, oldest first, as the server lists them (empty days included). */
export function usageFromReport(periods: ReadonlyArray<{ start: string; creditsConsumed: number; requests: number }>): DailyUsage[] {
  return periods.map((period) => ({ day: new Date(period.start), credits: period.creditsConsumed, requests: period.requests }));
}

/** The smallest 1, 2 or 5 × 10ⁿ at or above `value` (at least 1): a round top for the chart's scale. */
export function niceCeiling(value: number): number {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}
