import { expect, test } from "bun:test";
import { wantsCSV } from "./negotiation";

test("format decides over Accept", () => {
  expect(wantsCSV("csv", "application/json")).toBe(true);
  expect(wantsCSV("json", "text/csv")).toBe(false);
});

test("Accept picks CSV only when it ranks text/csv above JSON and wildcards", () => {
  expect(wantsCSV(undefined, null)).toBe(false);
  expect(wantsCSV(undefined, "text/csv")).toBe(true);
  expect(wantsCSV(undefined, "text/csv, application/json;q=0.5")).toBe(true);
  expect(wantsCSV(undefined, "application/json, text/csv")).toBe(false);
  expect(wantsCSV(undefined, "text/csv;q=0.4, application/json;q=0.9")).toBe(false);
  expect(wantsCSV(undefined, "*/*")).toBe(false);
  expect(wantsCSV(undefined, "text/csv, */*;q=0.1")).toBe(true);
  expect(wantsCSV(undefined, "text/csv;q=0")).toBe(false);
});

test("CSV fields are quoted when needed and never start a spreadsheet formula", async () => {
  const { csvField } = await import("./service");
  expect(csvField(null)).toBe("");
  expect(csvField(-3)).toBe("-3");
  expect(csvField("plain")).toBe("plain");
  expect(csvField('a "b", c')).toBe('"a ""b"", c"');
  expect(csvField("=HYPERLINK(1)")).toBe("'=HYPERLINK(1)");
  expect(csvField("-1,2")).toBe(`"'-1,2"`);
});
