import { describe, expect, test } from "bun:test";
import { addIntervals, periodContaining } from "./periods";

const at = (iso: string) => Date.parse(iso);

describe("addIntervals", () => {
  test("a month later keeps the day and the time of day", () => {
    expect(addIntervals(at("2026-11-22T10:00:00.000Z"), "month", 1)).toBe(at("2026-12-22T10:00:00.000Z"));
    expect(addIntervals(at("2026-11-22T10:00:00.000Z"), "month", 2)).toBe(at("2027-01-22T10:00:00.000Z"));
  });

  test("the 31st clamps to short months without drifting afterwards", () => {
    const anchor = at("2027-01-31T00:00:00.000Z");
    expect(addIntervals(anchor, "month", 1)).toBe(at("2027-02-28T00:00:00.000Z"));
    expect(addIntervals(anchor, "month", 2)).toBe(at("2027-03-31T00:00:00.000Z"));
    expect(addIntervals(at("2028-01-31T00:00:00.000Z"), "month", 1)).toBe(at("2028-02-29T00:00:00.000Z"));
  });

  test("a year after the 29th of February is the 28th", () => {
    expect(addIntervals(at("2028-02-29T12:00:00.000Z"), "year", 1)).toBe(at("2029-02-28T12:00:00.000Z"));
    expect(addIntervals(at("2028-02-29T12:00:00.000Z"), "year", 4)).toBe(at("2032-02-29T12:00:00.000Z"));
  });
});

describe("periodContaining", () => {
  test("finds the period that holds now, skipping the ones that passed", () => {
    const anchor = at("2026-01-15T00:00:00.000Z");
    expect(periodContaining(anchor, "month", at("2026-01-20T00:00:00.000Z"))).toEqual({ index: 0, start: anchor, end: at("2026-02-15T00:00:00.000Z") });
    expect(periodContaining(anchor, "month", at("2026-04-15T00:00:00.000Z"))).toEqual({
      index: 3,
      start: at("2026-04-15T00:00:00.000Z"),
      end: at("2026-05-15T00:00:00.000Z"),
    });
  });
});
