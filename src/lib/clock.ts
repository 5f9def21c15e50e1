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
