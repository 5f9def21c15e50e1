import { describe, expect, test } from "bun:test";
import { hasValidCheckDigit, normalizeGTIN } from "./gtin";

describe("normalizeGTIN", () => {
  test.each([
    ["4006381333931", "04006381333931"], // GTIN-13 (Stabilo pen)
    ["04006381333931", "04006381333931"], // the same as GTIN-14
    ["036000291452", "00036000291452"], // GTIN-12 / UPC-A
    ["96385074", "00000096385074"], // GTIN-8
    ["5901234123457", "05901234123457"], // GS1's own GTIN-13 example
    ["10614141000415", "10614141000415"], // GTIN-14 with indicator digit
    ["00000000000000", "00000000000000"], // all zeros has check digit 0
  ])("accepts %s as %s", (input, expected) => {
    expect(normalizeGTIN(input)).toBe(expected);
  });

  test.each([
    ["4006381333932", "wrong check digit"],
    ["400638133393", "valid digits, wrong length for its check digit"],
    ["40063813339311", "14 digits, bad check"],
    ["123456789", "9 digits"],
    ["12345678901", "11 digits"],
    ["123456789012345", "15 digits"],
    ["", "empty"],
    ["4006381333 31", "space inside"],
    ["4006381333９31", "full-width digit"],
    ["abcdefgh", "letters"],
    ["-4006381333931", "sign"],
    ["4006381333931\n", "trailing newline"],
    ["+0400638133393", "plus sign"],
  ])("rejects %j (%s)", (input) => {
    expect(normalizeGTIN(input)).toBeNull();
  });
});

describe("hasValidCheckDigit", () => {
  test("every other last digit of a valid GTIN fails", () => {
    const valid = "4006381333931";
    for (let digit = 0; digit <= 9; digit++) {
      const candidate = valid.slice(0, -1) + String(digit);
      expect(hasValidCheckDigit(candidate)).toBe(digit === 1);
    }
  });
});
