// Credits used per day, computed in the browser from usage transactions (amounts are negative).

export interface DailyUsage {
  /** Local midnight of the day. */
  day: Date;
  credits: number;
}

/** Local midnight `days - 1` days before `now`: the first day of a window of `days` days ending today. */
export function windowStart(now: Date, days: number): Date {
  return new Date(now.getFullYear(), now.getMonth(), now.getDate() - (days - 1));
}

function dayKey(date: Date): string {
  return `${date.getFullYear()}-${date.getMonth()}-${date.getDate()}`;
}

/**
 * One entry per local day of the window, oldest first, today last; days without usage are 0.
 * Transactions outside the window are ignored.
 */
export function usageByDay(transactions: ReadonlyArray<{ amount: number; createdAt: string }>, now: Date, days: number): DailyUsage[] {
  const start = windowStart(now, days);
  const series: DailyUsage[] = [];
  const index = new Map<string, DailyUsage>();
  for (let offset = 0; offset < days; offset++) {
    // Built from the calendar date, not by adding 24 h, so days stay whole across DST changes.
    const entry = { day: new Date(start.getFullYear(), start.getMonth(), start.getDate() + offset), credits: 0 };
    series.push(entry);
    index.set(dayKey(entry.day), entry);
  }
  for (const transaction of transactions) {
    const entry = index.get(dayKey(new Date(transaction.createdAt)));
    if (entry !== undefined) entry.credits += -transaction.amount;
  }
  return series;
}

/** The smallest 1, 2 or 5 × 10ⁿ at or above `value` (at least 1): a round top for the chart's scale. */
export function niceCeiling(value: number): number {
  if (value <= 1) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * magnitude >= value) return step * magnitude;
  return 10 * magnitude;
}
