/** Time source behind an interface so tests can move time without sleeping. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export class FakeClock implements Clock {
  constructor(private current: number = Date.parse("2026-11-22T10:00:00.000Z")) {}
  now(): number {
    return this.current;
  }
  advance(ms: number): void {
    this.current += ms;
  }
  set(ms: number): void {
    this.current = ms;
  }
}

export function toISO(ms: number): string;
export function toISO(ms: number | null): string | null;
export function toISO(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

/**
 * The calendar month (UTC) that `ms` falls in, as "YYYY-MM": the period of a key's monthly credit
 * limit. Judged by the server clock the caller passes, never by the database's.
 */
export function utcMonth(ms: number): string {
  const date = new Date(ms);
  return `${date.getUTCFullYear()}-${String(date.getUTCMonth() + 1).padStart(2, "0")}`;
}

/** The first instant of the calendar month (UTC) after the one `ms` falls in: when a monthly limit resets. */
export function nextUTCMonthStart(ms: number): number {
  const date = new Date(ms);
  return Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
}
