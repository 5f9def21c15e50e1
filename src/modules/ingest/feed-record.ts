import type { Availability, Condition, FeedRecord } from "../../db/store";
import { isCurrencyCode, parseMajorUnits } from "../../lib/money";
import { normalizeGTIN } from "../products/gtin";

export type FeedRecordResult = { ok: true; record: FeedRecord } | { ok: false; error: string };

const AVAILABILITIES: readonly Availability[] = ["in_stock", "out_of_stock", "preorder", "unknown"];
const CONDITIONS: readonly Condition[] = ["new", "used", "refurbished"];
const MAX_TITLE_CHARS = 500;
export const MAX_MERCHANT_ID_CHARS = 100;
/**
 * Feeds come from machines with slightly fast clocks: an observation up to this far ahead counts as
 * observed now (so it never holds off the next one), further ahead it is a wrong timestamp.
 */
export const MAX_CLOCK_SKEW_MS = 60 * 1000;
const QUOTED_VALUE_MAX_CHARS = 40;

/** RFC 3339 / ISO 8601 extended date-time; the offset is required so the instant is unambiguous. */
const ISO_TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d+))?)?(?:([Zz])|([+-])(\d{2}):?(\d{2}))$/;

/**
 * Most feed URLs: http(s), a host of ASCII letters, digits and hyphens whose last label starts with a
 * letter (so not an IPv4 address, which URL would check), an optional port of up to four digits, then
 * printable ASCII. URL accepts every one of them; matching is cheaper than building a URL object per
 * offer. IDNA labels (xn--) are left to URL, which may refuse them. Anything else is parsed by URL.
 */
const PLAIN_HTTP_URL = /^https?:\/\/(?:[a-z0-9-]+\.)*[a-z][a-z0-9-]*(?::\d{1,4})?(?:[/?#][!-~]*)?$/i;
const IDNA_LABEL = /xn--/i;

/** A field that failed validation; carries the message reported for the whole record. */
class InvalidField {
  constructor(readonly error: string) {}
}

/**
 * Validates and normalizes one feed record (an NDJSON object or a CSV row keyed by its header).
 * Without `merchantId` the record only upserts the product and its offer fields are not looked at.
 * `now` bounds `observedAt`: up to MAX_CLOCK_SKEW_MS ahead it is taken as `now`, further ahead rejected.
 */
export function parseFeedRecord(raw: Record<string, unknown>, now: number): FeedRecordResult {
  const product = readProduct(raw);
  if (product instanceof InvalidField) return { ok: false, error: product.error };
  const merchantId = readString(raw, "merchantId");
  if (merchantId instanceof InvalidField) return { ok: false, error: merchantId.error };
  if (merchantId === undefined) return { ok: true, record: { product } };
  const offer = readOffer(raw, merchantId, now);
  if (offer instanceof InvalidField) return { ok: false, error: offer.error };
  return { ok: true, record: { product, offer } };
}

function readProduct(raw: Record<string, unknown>): FeedRecord["product"] | InvalidField {
  const gtin = readGTIN(raw);
  if (gtin instanceof InvalidField) return gtin;
  const title = readString(raw, "title");
  if (title instanceof InvalidField) return title;
  if (title !== undefined && countCharacters(title, MAX_TITLE_CHARS) > MAX_TITLE_CHARS) {
    return new InvalidField(`title: longer than ${MAX_TITLE_CHARS} characters`);
  }
  const brand = readString(raw, "brand");
  if (brand instanceof InvalidField) return brand;
  const imageUrl = readHTTPURL(raw, "imageUrl");
  if (imageUrl instanceof InvalidField) return imageUrl;

  const product: FeedRecord["product"] = { gtin };
  if (title !== undefined) product.title = title;
  if (brand !== undefined) product.brand = brand;
  if (imageUrl !== undefined) product.imageUrl = imageUrl;
  return product;
}

function readOffer(raw: Record<string, unknown>, merchantId: string, now: number): NonNullable<FeedRecord["offer"]> | InvalidField {
  if (countCharacters(merchantId, MAX_MERCHANT_ID_CHARS) > MAX_MERCHANT_ID_CHARS) {
    return new InvalidField(`merchantId: longer than ${MAX_MERCHANT_ID_CHARS} characters`);
  }
  const merchantName = readString(raw, "merchantName");
  if (merchantName instanceof InvalidField) return merchantName;
  const currency = readCurrency(raw);
  if (currency instanceof InvalidField) return currency;
  const priceAmount = readAmount(raw, "price", currency);
  if (priceAmount instanceof InvalidField) return priceAmount;
  if (priceAmount === undefined) return new InvalidField("price: required with merchantId");
  const shippingAmount = readAmount(raw, "shipping", currency);
  if (shippingAmount instanceof InvalidField) return shippingAmount;
  const availability = readChoice(raw, "availability", AVAILABILITIES, "unknown");
  if (availability instanceof InvalidField) return availability;
  const condition = readChoice(raw, "condition", CONDITIONS, "new");
  if (condition instanceof InvalidField) return condition;
  const url = readHTTPURL(raw, "url");
  if (url instanceof InvalidField) return url;
  const observedAt = readObservedAt(raw, now);
  if (observedAt instanceof InvalidField) return observedAt;

  const offer: NonNullable<FeedRecord["offer"]> = {
    merchantId,
    priceAmount,
    currency,
    shippingAmount: shippingAmount ?? null,
    availability,
    condition,
    url: url ?? null,
    observedAt,
  };
  if (merchantName !== undefined) offer.merchantName = merchantName;
  return offer;
}

/** A trimmed string, or undefined when the field is missing, null or empty (CSV has no "absent"). */
function readString(raw: Record<string, unknown>, field: string): string | undefined | InvalidField {
  const value = raw[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") return new InvalidField(`${field}: must be a string`);
  if (value.length > 0 && isPrintableASCII(value.charCodeAt(0)) && isPrintableASCII(value.charCodeAt(value.length - 1))) return value;
  const trimmed = value.trim();
  return trimmed === "" ? undefined : trimmed;
}

/** Printable ASCII but the space: never whitespace, so a value between two of these needs no trim. */
function isPrintableASCII(code: number): boolean {
  return code > 32 && code < 127;
}

function readGTIN(raw: Record<string, unknown>): string | InvalidField {
  const value = readString(raw, "gtin");
  if (value instanceof InvalidField) return value;
  if (value === undefined) return new InvalidField("gtin: required");
  return normalizeGTIN(value) ?? new InvalidField(`gtin: ${quote(value)} is not a valid GTIN`);
}

function readCurrency(raw: Record<string, unknown>): string | InvalidField {
  const value = readString(raw, "currency");
  if (value instanceof InvalidField) return value;
  if (value === undefined) return new InvalidField("currency: required with merchantId");
  return isCurrencyCode(value) ? value : new InvalidField(`currency: ${quote(value)} is not an ISO 4217 code`);
}

/** Integer minor units of a decimal major-unit string; JSON numbers are accepted through String(). */
function readAmount(raw: Record<string, unknown>, field: string, currency: string): number | undefined | InvalidField {
  const original = raw[field];
  const value = typeof original === "number" ? String(original) : readString(raw, field);
  if (value === undefined || value instanceof InvalidField) return value;
  const amount = parseMajorUnits(value, currency);
  if (amount !== null) return amount;
  if (/^\d+\.\d+$/.test(value)) {
    return new InvalidField(`${field}: ${quote(value)} has more decimal places than ${currency} allows`);
  }
  return new InvalidField(`${field}: ${quote(value)} is not a decimal amount`);
}

function readChoice<T extends string>(raw: Record<string, unknown>, field: string, choices: readonly T[], fallback: T): T | InvalidField {
  const value = readString(raw, field);
  if (value === undefined) return fallback;
  if (value instanceof InvalidField) return value;
  for (const choice of choices) if (choice === value) return choice;
  return new InvalidField(`${field}: ${quote(value)} is not one of ${choices.join(", ")}`);
}

function readHTTPURL(raw: Record<string, unknown>, field: string): string | undefined | InvalidField {
  const value = readString(raw, field);
  if (value === undefined || value instanceof InvalidField) return value;
  if (PLAIN_HTTP_URL.test(value) && !IDNA_LABEL.test(value)) return value;
  const url = URL.parse(value);
  if (url === null || (url.protocol !== "http:" && url.protocol !== "https:")) {
    return new InvalidField(`${field}: ${quote(value)} is not an http(s) URL`);
  }
  return value;
}

function readObservedAt(raw: Record<string, unknown>, now: number): number | InvalidField {
  const value = readString(raw, "observedAt");
  if (value instanceof InvalidField) return value;
  if (value === undefined) return new InvalidField("observedAt: required with merchantId");
  const observedAt = parseISOTimestampOnce(value);
  if (observedAt === null) {
    return new InvalidField(`observedAt: ${quote(value)} is not an ISO 8601 timestamp with a timezone`);
  }
  if (observedAt > now + MAX_CLOCK_SKEW_MS) return new InvalidField(`observedAt: ${quote(value)} is more than ${MAX_CLOCK_SKEW_MS / 1000} s in the future`);
  return Math.min(observedAt, now);
}

/** The last timestamp parsed: the records of one feed often share their `observedAt`. */
let lastTimestamp: { text: string; value: number | null } = { text: "", value: null };

function parseISOTimestampOnce(text: string): number | null {
  if (text !== lastTimestamp.text) lastTimestamp = { text, value: parseISOTimestamp(text) };
  return lastTimestamp.value;
}

/**
 * Epoch milliseconds of an ISO 8601 date-time with a `Z` or `±hh:mm` offset, or null. Parsed by
 * hand because `Date.parse` accepts many other shapes and treats a missing offset as local time.
 */
function parseISOTimestamp(value: string): number | null {
  const match = ISO_TIMESTAMP.exec(value);
  if (match === null) return null;
  const [, years, months, days, hours, minutes, seconds = "0", fraction = "", , sign = "+", offsetHours = "0", offsetMinutes = "0"] = match;
  const [year, month, day, hour, minute, second] = [years, months, days, hours, minutes, seconds].map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const offset = { hours: Number(offsetHours), minutes: Number(offsetMinutes) };
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null;
  if (hour > 23 || minute > 59 || second > 59 || offset.hours > 23 || offset.minutes > 59) return null;

  const date = new Date(0);
  // setUTCFullYear, unlike Date.UTC, does not map years 0–99 to 1900–1999.
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, Number(fraction.slice(0, 3).padEnd(3, "0")));
  const offsetMs = (offset.hours * 60 + offset.minutes) * 60_000;
  return date.getTime() - (sign === "-" ? -offsetMs : offsetMs);
}

function daysInMonth(year: number, month: number): number {
  const isLeapYear = (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0;
  return [31, isLeapYear ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1] ?? 0;
}

/** Characters (code points) of `value`; counted only past `max` UTF-16 units, which never hold more. */
function countCharacters(value: string, max: number): number {
  if (value.length <= max) return value.length;
  let count = 0;
  for (const _ of value) count++;
  return count;
}

/** The offending value as JSON, cut short so one bad field cannot flood the report. */
function quote(value: string): string {
  const shown = value.length > QUOTED_VALUE_MAX_CHARS ? `${value.slice(0, QUOTED_VALUE_MAX_CHARS)}…` : value;
  return JSON.stringify(shown);
}
