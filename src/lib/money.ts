import type { Language } from "../http/i18n";

export interface Money {
  amount: number;
  currency: string;
  formatted: string;
}

const formatters = new Map<string, Intl.NumberFormat>();

function formatterFor(language: Language, currency: string): Intl.NumberFormat {
  const cacheKey = `${language}:${currency}`;
  let formatter = formatters.get(cacheKey);
  if (formatter === undefined) {
    formatter = new Intl.NumberFormat(language === "fr" ? "fr-FR" : "en-IE", { style: "currency", currency });
    formatters.set(cacheKey, formatter);
  }
  return formatter;
}

const minorDigits = new Map<string, number>();

/** Minor units of a currency (2 for EUR, 0 for JPY), from Intl so no table is kept by hand. */
export function minorUnitDigits(currency: string): number {
  let digits = minorDigits.get(currency);
  if (digits === undefined) {
    digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits ?? 2;
    minorDigits.set(currency, digits);
  }
  return digits;
}

/** Formatted amounts, remembered: Intl takes about 1 µs per call and a price answer makes eight or so. */
const formattedAmounts = new Map<string, string>();
const FORMATTED_AMOUNTS_KEPT = 100_000;

export function money(amount: number, currency: string, language: Language): Money {
  const cacheKey = `${language}${currency}${amount}`;
  let formatted = formattedAmounts.get(cacheKey);
  if (formatted === undefined) {
    const scale = 10 ** minorUnitDigits(currency);
    // Intl formats a float; the division is exact enough for display and the integer stays the truth.
    formatted = formatterFor(language, currency)
      .format(amount / scale)
      .replace(/\u202f|\u00a0/g, " ");
    if (formattedAmounts.size >= FORMATTED_AMOUNTS_KEPT) formattedAmounts.clear();
    formattedAmounts.set(cacheKey, formatted);
  }
  return { amount, currency, formatted };
}

/**
 * Parses a decimal string of major units ("12.99", "12", "0.5") into integer minor units without
 * going through floating point. Returns null when the string is not a plain non-negative decimal or
 * has more fraction digits than the currency allows.
 */
export function parseMajorUnits(value: string, currency: string): number | null {
  // By hand rather than with a regular expression: feed imports parse two amounts per offer.
  const text = value.trim();
  const digits = minorUnitDigits(currency);
  let units = 0;
  let index = 0;
  for (; index < text.length && index <= 12; index++) {
    const code = text.charCodeAt(index);
    if (code < 48 || code > 57) break;
    units = units * 10 + (code - 48);
  }
  if (index === 0 || index > 12) return null;
  let minor = 0;
  let fractionDigits = 0;
  if (index < text.length) {
    if (text.charCodeAt(index) !== 46 || index === text.length - 1) return null;
    for (index++; index < text.length; index++, fractionDigits++) {
      const code = text.charCodeAt(index);
      if (code < 48 || code > 57 || fractionDigits === digits) return null;
      minor = minor * 10 + (code - 48);
    }
  }
  return units * 10 ** digits + minor * 10 ** (digits - fractionDigits);
}

const currencyCodes = new Set<string>();

export function isCurrencyCode(value: string): boolean {
  if (currencyCodes.has(value)) return true;
  if (!/^[A-Z]{3}$/.test(value)) return false;
  try {
    minorUnitDigits(value);
    currencyCodes.add(value);
    return true;
  } catch {
    return false;
  }
}
