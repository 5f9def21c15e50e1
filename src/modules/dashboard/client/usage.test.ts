import { describe, expect, test } from "bun:test";
import { niceCeiling, usageFromReport, windowStart } from "./usage";

describe("usage per day", () => {
  test("the window starts at UTC midnight 29 days before today, whatever the hour", () => {
    expect(windowStart(new Date("2026-11-22T23:30:00Z"), 30)).toEqual(new Date("2026-10-24T00:00:00Z"));
    expect(windowStart(new Date("2026-11-22T00:00:00Z"), 30)).toEqual(new Date("2026-10-24T00:00:00Z"));
  });

  test("each period of the server's report is a day of the chart, with its credits and requests", () => {
    const series = usageFromReport([
      { start: "2026-11-21T00:00:00.000Z", creditsConsumed: 0, requests: 12 },
      { start: "2026-11-22T00:00:00.000Z", creditsConsumed: 3, requests: 5 },
    ]);
    expect(series).toEqual([
      { day: new Date("2026-11-21T00:00:00Z"), credits: 0, requests: 12 },
      { day: new Date("2026-11-22T00:00:00Z"), credits: 3, requests: 5 },
    ]);
  });

  test("the scale tops out at a round number", () => {
    expect([0, 1, 3, 7, 12, 20, 99, 101, 4500].map(niceCeiling)).toEqual([1, 1, 5, 10, 20, 20, 100, 200, 5000]);
  });
});
