// The usage chart: an inline SVG bar chart, one bar per day. No chart library.
import { s } from "./dom";
import type { DailyUsage } from "./usage";
import { niceCeiling } from "./usage";

const WIDTH = 640;
const HEIGHT = 220;
const LEFT = 48;
const BOTTOM = 28;
const TOP = 12;

/**
 * A bar chart of `days`. `summary` names the chart for screen readers (role="img"); each bar has a
 * tooltip `label(day)`. The page puts the same numbers in a table beside it.
 */
export function usageChart(
  days: DailyUsage[],
  texts: { summary: string; label: (entry: DailyUsage) => string; axisDay: (day: Date) => string; axisNumber: (value: number) => string },
): SVGSVGElement {
  const top = niceCeiling(Math.max(0, ...days.map((entry) => entry.credits)));
  const plotWidth = WIDTH - LEFT;
  const plotHeight = HEIGHT - TOP - BOTTOM;
  const slot = plotWidth / Math.max(1, days.length);
  const y = (value: number) => TOP + plotHeight - (value / top) * plotHeight;

  // Half-way line only where it falls on a whole number of credits.
  const grid = (top % 2 === 0 ? [0, top / 2, top] : [0, top]).map((value) =>
    s(
      "g",
      { class: "grid" },
      s("line", { x1: LEFT, x2: WIDTH, y1: y(value), y2: y(value) }),
      s("text", { x: LEFT - 6, y: y(value) + 4, "text-anchor": "end" }, texts.axisNumber(value)),
    ),
  );
  const bars = days.map((entry, index) => {
    const height = Math.max(entry.credits > 0 ? 1 : 0, (entry.credits / top) * plotHeight);
    return s(
      "rect",
      {
        class: "bar",
        x: (LEFT + index * slot + slot * 0.15).toFixed(1),
        y: (TOP + plotHeight - height).toFixed(1),
        width: (slot * 0.7).toFixed(1),
        height: height.toFixed(1),
      },
      s("title", {}, texts.label(entry)),
    );
  });
  const labelAt = (index: number, anchor: string) => {
    const entry = days[index];
    return entry === undefined
      ? null
      : s("text", { class: "axis", x: (LEFT + index * slot + slot / 2).toFixed(1), y: HEIGHT - 8, "text-anchor": anchor }, texts.axisDay(entry.day));
  };
  return s(
    "svg",
    { class: "chart", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": texts.summary, preserveAspectRatio: "xMidYMid meet" },
    ...grid,
    ...bars,
    labelAt(0, "start"),
    labelAt(Math.floor(days.length / 2), "middle"),
    labelAt(days.length - 1, "end"),
  );
}
