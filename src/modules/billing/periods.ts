import type { PlanInterval } from "../../db/billing/records";

function daysInMonth(year: number, month: number): number {
  return new Date(Date.UTC(year, month + 1, 0)).getUTCDate();
}

/**
 * `anchor` moved by `count` months or years in UTC, keeping the day of the month and clamping it to
 * the month's length: periods counted from one anchor never drift (Jan 31 → Feb 28 → Mar 31).
 */
export function addIntervals(anchor: number, interval: PlanInterval, count: number): number {
  const date = new Date(anchor);
  const months = date.getUTCMonth() + count * (interval === "year" ? 12 : 1);
  const year = date.getUTCFullYear() + Math.floor(months / 12);
  const month = ((months % 12) + 12) % 12;
  const day = Math.min(date.getUTCDate(), daysInMonth(year, month));
  return Date.UTC(year, month, day, date.getUTCHours(), date.getUTCMinutes(), date.getUTCSeconds(), date.getUTCMilliseconds());
}

/** The period of a subscription started at `anchor` that contains `now`: [start, end). */
export function periodContaining(anchor: number, interval: PlanInterval, now: number): { index: number; start: number; end: number } {
  let index = 0;
  while (addIntervals(anchor, interval, index + 1) <= now) index++;
  return { index, start: addIntervals(anchor, interval, index), end: addIntervals(anchor, interval, index + 1) };
}
