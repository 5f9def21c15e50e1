import { describe, expect, test } from "bun:test";
import { parseFeedRecord } from "./feed-record";

const NOW = Date.parse("2026-11-22T10:00:00.000Z");

const offerRecord = {
  gtin: "4006381333931",
  title: "Stabilo point 88",
  brand: "Stabilo",
  imageUrl: "https://img.example/88.jpg",
  merchantId: "shop-a",
  merchantName: "Shop A",
  price: "12.99",
  currency: "EUR",
  shipping: "4.90",
  availability: "in_stock",
  condition: "used",
  url: "https://shop-a.example/p/88",
  observedAt: "2026-11-22T09:00:00Z",
};

function errorOf(raw: Record<string, unknown>, now: number = NOW): string | null {
  const result = parseFeedRecord(raw, now);
  return result.ok ? null : result.error;
}

function offerWith(changes: Record<string, unknown>): Record<string, unknown> {
  return { ...offerRecord, ...changes };
}

describe("parseFeedRecord", () => {
  test("a complete offer record becomes a normalized product and offer with integer amounts", () => {
    expect(parseFeedRecord(offerRecord, NOW)).toEqual({
      ok: true,
      record: {
        product: { gtin: "04006381333931", title: "Stabilo point 88", brand: "Stabilo", imageUrl: "https://img.example/88.jpg" },
        offer: {
          merchantId: "shop-a",
          merchantName: "Shop A",
          priceAmount: 1299,
          currency: "EUR",
          shippingAmount: 490,
          availability: "in_stock",
          condition: "used",
          url: "https://shop-a.example/p/88",
          observedAt: Date.parse("2026-11-22T09:00:00Z"),
        },
      },
    });
  });

  test("an offer without optional fields gets unknown availability, new condition and no shipping or url", () => {
    const result = parseFeedRecord({ gtin: "96385074", merchantId: "shop-a", price: "3", currency: "EUR", observedAt: "2026-11-22T09:00:00Z" }, NOW);
    expect(result).toEqual({
      ok: true,
      record: {
        product: { gtin: "00000096385074" },
        offer: {
          merchantId: "shop-a",
          priceAmount: 300,
          currency: "EUR",
          shippingAmount: null,
          availability: "unknown",
          condition: "new",
          url: null,
          observedAt: Date.parse("2026-11-22T09:00:00Z"),
        },
      },
    });
  });

  test("a record without merchantId is product-only and its offer fields are not even checked", () => {
    const result = parseFeedRecord({ gtin: "4006381333931", title: "Pen", price: "not money", currency: "nope", observedAt: "later" }, NOW);
    expect(result).toEqual({ ok: true, record: { product: { gtin: "04006381333931", title: "Pen" } } });
  });

  test("strings are trimmed and empty strings count as absent, as CSV cells do", () => {
    const result = parseFeedRecord(
      offerWith({ gtin: " 4006381333931 ", title: "  Pen ", brand: "", imageUrl: "", shipping: "", availability: " ", condition: "", url: "" }),
      NOW,
    );
    expect(result.ok && result.record.product).toEqual({ gtin: "04006381333931", title: "Pen" });
    expect(result.ok && result.record.offer).toMatchObject({ shippingAmount: null, availability: "unknown", condition: "new", url: null });
  });

  test("an empty merchantId makes the record product-only", () => {
    const result = parseFeedRecord(offerWith({ merchantId: "  " }), NOW);
    expect(result.ok && result.record.offer).toBeUndefined();
  });

  test("null fields count as absent", () => {
    const result = parseFeedRecord(offerWith({ shipping: null, url: null, title: null }), NOW);
    expect(result.ok && result.record.offer).toMatchObject({ shippingAmount: null, url: null });
    expect(result.ok && result.record.product.title).toBeUndefined();
  });

  test("a JSON number price is read through its decimal string", () => {
    const result = parseFeedRecord(offerWith({ price: 12.5, shipping: 0 }), NOW);
    expect(result.ok && result.record.offer).toMatchObject({ priceAmount: 1250, shippingAmount: 0 });
  });

  test("amounts use the currency's own minor units", () => {
    const result = parseFeedRecord(offerWith({ price: "1200", shipping: "", currency: "JPY" }), NOW);
    expect(result.ok && result.record.offer?.priceAmount).toBe(1200);
  });

  test("a title of exactly 500 characters is accepted", () => {
    expect(errorOf(offerWith({ title: "x".repeat(500) }))).toBeNull();
  });

  test("observedAt with an offset is converted to the same instant", () => {
    const result = parseFeedRecord(offerWith({ observedAt: "2026-11-22T10:30:00.250+02:00" }), NOW);
    expect(result.ok && result.record.offer?.observedAt).toBe(Date.parse("2026-11-22T08:30:00.250Z"));
  });

  test("observedAt up to a minute ahead of now is clock skew: accepted, and taken as observed now", () => {
    const result = parseFeedRecord(offerWith({ observedAt: "2026-11-22T10:01:00Z" }), NOW);
    expect(result.ok && result.record.offer?.observedAt).toBe(NOW);
  });

  test("observedAt on a leap day is accepted", () => {
    expect(errorOf(offerWith({ observedAt: "2024-02-29T12:00:00Z" }))).toBeNull();
  });

  test.each([
    ["gtin: required", { gtin: undefined }],
    ["gtin: required", { gtin: "" }],
    ['gtin: "4006381333932" is not a valid GTIN', { gtin: "4006381333932" }],
    ["gtin: must be a string", { gtin: 4006381333931 }],
    ["title: longer than 500 characters", { title: "x".repeat(501) }],
    ["brand: must be a string", { brand: ["Stabilo"] }],
    ['imageUrl: "ftp://img.example/88.jpg" is not an http(s) URL', { imageUrl: "ftp://img.example/88.jpg" }],
    ['imageUrl: "img.jpg" is not an http(s) URL', { imageUrl: "img.jpg" }],
    ["merchantId: longer than 100 characters", { merchantId: "m".repeat(101) }],
    ["merchantId: must be a string", { merchantId: 42 }],
    ["price: required with merchantId", { price: undefined }],
    ["price: required with merchantId", { price: "" }],
    ['price: "12,99" is not a decimal amount', { price: "12,99" }],
    ['price: "-1.00" is not a decimal amount', { price: "-1.00" }],
    ['price: "1e3" is not a decimal amount', { price: "1e3" }],
    ['price: "€12" is not a decimal amount', { price: "€12" }],
    ['price: "-1" is not a decimal amount', { price: -1 }],
    ['price: "12.999" has more decimal places than EUR allows', { price: "12.999" }],
    ['price: "12.5" has more decimal places than JPY allows', { price: "12.5", currency: "JPY" }],
    ["currency: required with merchantId", { currency: undefined }],
    ['currency: "eur" is not an ISO 4217 code', { currency: "eur" }],
    ['currency: "EURO" is not an ISO 4217 code', { currency: "EURO" }],
    ['shipping: "free" is not a decimal amount', { shipping: "free" }],
    ['availability: "soon" is not one of in_stock, out_of_stock, preorder, unknown', { availability: "soon" }],
    ['availability: "IN_STOCK" is not one of in_stock, out_of_stock, preorder, unknown', { availability: "IN_STOCK" }],
    ['condition: "broken" is not one of new, used, refurbished', { condition: "broken" }],
    ['url: "javascript:alert(1)" is not an http(s) URL', { url: "javascript:alert(1)" }],
    ["observedAt: required with merchantId", { observedAt: undefined }],
    ['observedAt: "yesterday" is not an ISO 8601 timestamp with a timezone', { observedAt: "yesterday" }],
    ['observedAt: "2026-11-22T09:00:00" is not an ISO 8601 timestamp with a timezone', { observedAt: "2026-11-22T09:00:00" }],
    ['observedAt: "2026-11-22" is not an ISO 8601 timestamp with a timezone', { observedAt: "2026-11-22" }],
    ['observedAt: "2025-02-29T09:00:00Z" is not an ISO 8601 timestamp with a timezone', { observedAt: "2025-02-29T09:00:00Z" }],
    ['observedAt: "2026-11-22T24:00:00Z" is not an ISO 8601 timestamp with a timezone', { observedAt: "2026-11-22T24:00:00Z" }],
    ["observedAt: must be a string", { observedAt: 1795000000000 }],
    ['observedAt: "2026-11-22T10:01:01Z" is more than 60 s in the future', { observedAt: "2026-11-22T10:01:01Z" }],
  ])("rejects the record with the error %s", (message, changes) => {
    expect(errorOf(offerWith(changes))).toBe(message);
  });

  test("a URL is accepted exactly when URL parses it as http(s), on the quick path for plain URLs too", () => {
    const urls = [
      "https://shop.example/p/88?ref=feed#top",
      "HTTP://Shop-A.Example:8080/p/%zz/\\x",
      "http://localhost",
      "http://a..b/",
      "http://-.com/",
      "http://1.2.3.4/",
      "http://1.2.3.256/",
      "http://shop.0x1/",
      "http://shop.example:99999/",
      "http://xn--a.example/",
      "http://xn--nxasmq6b.example/",
      "http://user@shop.example/",
      "https://shop example/",
      "https:shop.example",
      "https://",
    ];
    for (const url of urls) {
      const parsed = URL.parse(url);
      const isHTTP = parsed !== null && (parsed.protocol === "http:" || parsed.protocol === "https:");
      expect([url, errorOf(offerWith({ url })) === null]).toEqual([url, isHTTP]);
    }
  });

  test("a long bad value is cut short in the message", () => {
    const error = errorOf(offerWith({ price: "9".repeat(1000) }));
    expect(error).toBe(`price: "${"9".repeat(40)}…" is not a decimal amount`);
  });

  test("a product-only record still checks its product fields", () => {
    expect(errorOf({ gtin: "4006381333931", imageUrl: "data:image/png;base64,AAAA" })).toBe('imageUrl: "data:image/png;base64,AAAA" is not an http(s) URL');
  });
});
