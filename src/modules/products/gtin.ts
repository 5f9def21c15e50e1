const VALID_LENGTHS = new Set([8, 12, 13, 14]);

/** GS1 mod-10 check: weights 3,1,3,… from the rightmost digit before the check digit. */
export function hasValidCheckDigit(digits: string): boolean {
  let sum = 0;
  for (let index = digits.length - 2, weight = 3; index >= 0; index--, weight = 4 - weight) {
    sum += (digits.charCodeAt(index) - 48) * weight;
  }
  return (10 - (sum % 10)) % 10 === digits.charCodeAt(digits.length - 1) - 48;
}

/**
 * A GTIN-8, -12, -13 or -14 as its 14-digit form (left-padded with zeros), or null when the value
 * is not digits of a valid length with a valid check digit. Storage keys products by this form.
 */
export function normalizeGTIN(value: string): string | null {
  if (!VALID_LENGTHS.has(value.length) || !/^\d+$/.test(value)) return null;
  if (!hasValidCheckDigit(value)) return null;
  return value.padStart(14, "0");
}
