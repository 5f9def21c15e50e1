import { describe, expect, test } from "bun:test";
import { niceCeiling, usageByDay, windowStart } from "./usage";

const NOW = new Date(2026, 10, 22, 15, 30); // 22 Nov 2026, 15:30 local time

describe("usage per day", () => {
  test("the window has one entry per day, oldest first, ending today", () => {
    const series = usageByDay([], NOW, 30);
    expect(series).toHaveLength(30);
    expect(series[0]!.day).toEqual(new Date(2026, 9, 24));
    expect(series[29]!.day).toEqual(new Date(2026, 10, 22));
    expect(series.every((entry) => entry.credits === 0)).toBe(true);
    expect(windowStart(NOW, 30)).toEqual(series[0]!.day);
  });

  test("usage transactions are summed per local day as positive credits", () => {
    const at = (day: number, hour: number) => new Date(2026, 10, day, hour).toISOString();
    const series = usageByDay(
      [
        { amount: -1, createdAt: at(22, 9) },
        { amount: -2, createdAt: at(22, 0) },
        { amount: -1, createdAt: at(21, 23) },
      ],
      NOW,
      30,
    );
    expect(series[29]!.credits).toBe(3);
    expect(series[28]!.credits).toBe(1);
  });

  test("transactions before the window or after today are left out", () => {
    const series = usageByDay(
      [
        { amount: -5, createdAt: new Date(2026, 9, 23, 23, 59).toISOString() },
        { amount: -7, createdAt: new Date(2026, 10, 23, 0, 1).toISOString() },
      ],
      NOW,
      30,
    );
    expect(series.reduce((sum, entry) => sum + entry.credits, 0)).toBe(0);
  });

  test("the scale tops out at a round number", () => {
    expect([0, 1, 3, 7, 12, 20, 99, 101, 4500].map(niceCeiling)).toEqual([1, 1, 5, 10, 20, 20, 100, 200, 5000]);
  });
});
