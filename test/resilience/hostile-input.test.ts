import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import fc from "fast-check";
import { normalizeGTIN } from "../../src/modules/products/gtin";
import { importFeed } from "../../src/modules/ingest/import-feed";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { addProduct, createOrganization, createTestContext, signIn, type TestContext, type TestOrganization } from "../support/context";

// Short property runs for the suite; scripts/fuzz.ts runs the same properties for much longer.
const RUNS = Number(process.env.FUZZ_RUNS ?? 150);

const hostileString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.constantFrom(
    "' OR 1=1 --",
    "../../etc/passwd",
    "%00",
    "<script>alert(1)</script>",
    "$" + "{jndi:ldap://x}",
    "\u0000",
    "\uFFFF",
    "🙂".repeat(50),
    "9".repeat(5000),
    "%",
    "%%",
    "%E0%A4%A",
  ),
);

describe("the GTIN parser", () => {
  test("accepts exactly digit strings of length 8, 12, 13 or 14 with a valid check digit, and pads to 14", () => {
    fc.assert(
      fc.property(hostileString, (value) => {
        const normalized = normalizeGTIN(value);
        if (normalized === null) return true;
        return /^\d{14}$/.test(normalized) && [8, 12, 13, 14].includes(value.length) && normalized.endsWith(value);
      }),
      { numRuns: RUNS * 5 },
    );
  });

  test("every digit string of a valid length has exactly one valid check digit", () => {
    fc.assert(
      fc.property(fc.constantFrom(7, 11, 12, 13), fc.nat(), (bodyLength, seed) => {
        const body = String(seed).padStart(bodyLength, "0").slice(-bodyLength);
        const valid = Array.from({ length: 10 }, (_, d) => normalizeGTIN(body + d)).filter((x) => x !== null);
        return valid.length === 1;
      }),
      { numRuns: RUNS },
    );
  });
});

describe("the feed importer", () => {
  test("any input lines give a report that accounts for every record, and the store stays readable", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            hostileString,
            fc.json(),
            fc.constant('{"gtin":"4006381333931","merchantId":"m","price":"1.00","currency":"EUR","observedAt":"2026-11-22T10:00:00Z"}'),
          ),
          { maxLength: 30 },
        ),
        async (lines) => {
          const store = SQLiteStore.open("sqlite::memory:");
          const stream = new Blob([lines.join("\n")]).stream();
          const report = await importFeed(store, stream, { format: "ndjson", now: Date.parse("2026-11-22T10:00:00Z") });
          const nonBlank = lines
            .join("\n")
            .split("\n")
            .filter((line) => line.trim() !== "").length;
          expect(report.read).toBe(nonBlank);
          expect(report.rejected.length).toBeLessThanOrEqual(report.read);
          expect(report.rejected.every((r) => r.line >= 1 && typeof r.error === "string")).toBe(true);
          expect(await store.countProducts()).toBe(report.products);
          await store.close();
        },
      ),
      { numRuns: Math.ceil(RUNS / 3) },
    );
  });

  test("CSV input of any shape never throws", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.array(hostileString, { maxLength: 6 }).map((cells) => cells.join(",")),
          { maxLength: 20 },
        ),
        async (rows) => {
          const store = SQLiteStore.open("sqlite::memory:");
          const csv = ["gtin,title,merchantId,price,currency,observedAt", ...rows].join("\r\n");
          const report = await importFeed(store, new Blob([csv]).stream(), { format: "csv", now: Date.now() });
          expect(report.read).toBeGreaterThanOrEqual(0);
          await store.close();
        },
      ),
      { numRuns: Math.ceil(RUNS / 3) },
    );
  });
});

describe("the data endpoint under hostile requests", () => {
  let context: TestContext;
  let org: TestOrganization;
  beforeAll(async () => {
    context = await createTestContext();
    org = await createOrganization(context, 1_000_000);
    await addProduct(context, "04006381333931", [{ merchantId: "m", price: 100, ageMs: 1000 }]);
  });
  afterAll(async () => {
    await context.close();
  });

  test("any path segment, query string and header values get a JSON answer below 500, and problems are problem+json", async () => {
    await fc.assert(
      fc.asyncProperty(hostileString, hostileString, hostileString, fc.boolean(), async (segment, queryValue, headerValue, authenticated) => {
        const path = `/api/v1/products/${encodeURIComponent(segment)}/price?language=${encodeURIComponent(queryValue)}&${encodeURIComponent(queryValue)}=1`;
        const headers: Record<string, string> = { "accept-language": headerValue.replace(/[^\t\x20-\x7e]/g, "") };
        if (authenticated) headers.authorization = org.auth.authorization;
        else headers.authorization = `Bearer ${headerValue.replace(/[^\t\x20-\x7e]/g, "")}`;
        const response = await context.request(path, { headers });
        expect(response.status).toBeLessThan(500);
        if (response.status >= 400) {
          expect(response.headers.get("content-type")).toBe("application/problem+json");
          const body = await response.json();
          expect(body.status).toBe(response.status);
          expect(typeof body.detail).toBe("string");
        }
      }),
      { numRuns: RUNS },
    );
  });

  test("raw malformed paths never crash the router", async () => {
    for (const raw of [
      "/api/v1/products/%/price",
      "/api/v1/products/%E0%A4%A/price",
      "/api/v1/products//price",
      `/api/v1/products/${"9".repeat(10_000)}/price`,
      "/api/v1/products/..%2F..%2F/price",
    ]) {
      const response = await context.request(raw, { headers: org.auth });
      expect(response.status).toBeLessThan(500);
    }
  });
});

describe("JSON endpoints under hostile bodies and headers", () => {
  const POSTS = [
    "/api/v1/customer/api-keys",
    "/api/v1/customer/billing/checkout/pack",
    "/api/v1/customer/billing/checkout/subscription",
    "/api/v1/customer/billing/portal",
    "/api/v1/auth/dev-login",
    "/api/v1/auth/oidc",
    "/api/v1/auth/refresh",
    "/api/v1/auth/logout",
  ];
  let context: TestContext;
  let cookie: string;
  beforeAll(async () => {
    context = await createTestContext();
    cookie = (await signIn(context, "fuzz@example.com")).headers.cookie;
  });
  afterAll(async () => {
    await context.close();
  });

  const body = fc.oneof(
    fc.json().map((text) => text),
    hostileString,
    fc.constantFrom(
      "{",
      "[]",
      "null",
      `{"name":${'"x"'.repeat(1000)}}`,
      '{"__proto__":{"admin":true},"name":"x"}',
      '{"name":"a","name":"b"}',
      "\uFEFF{}",
      '{"packId":{"$ne":null}}',
    ),
  );
  const header = fc.string({ maxLength: 300 }).map((value) => value.replace(/[^\t\x20-\x7e]/g, ""));

  test("any body, content type and Idempotency-Key gets an answer below 500, errors as problem+json", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...POSTS),
        body,
        fc.constantFrom(
          "application/json",
          "application/json; charset=utf-8",
          "text/plain",
          "application/x-www-form-urlencoded",
          "multipart/form-data; boundary=x",
          "",
        ),
        header,
        fc.boolean(),
        async (path, payload, type, key, signedIn) => {
          const headers: Record<string, string> = { "idempotency-key": key };
          if (type !== "") headers["content-type"] = type;
          if (signedIn) headers.cookie = cookie;
          const response = await context.request(path, { method: "POST", headers, body: payload });
          expect(response.status).toBeLessThan(500);
          if (response.status >= 400) {
            expect(response.headers.get("content-type")).toBe("application/problem+json");
            expect((await response.json()).status).toBe(response.status);
          }
        },
      ),
      { numRuns: RUNS * 2 },
    );
  });

  test("hostile query parameters on list endpoints get an answer below 500", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("/api/v1/customer/api-keys", "/api/v1/customer/billing/transactions", "/api/v1/customer/billing/invoices"),
        fc.dictionary(fc.constantFrom("limit", "cursor", "type", "from", "to", "language"), hostileString, { maxKeys: 4 }),
        async (path, query) => {
          const search = new URLSearchParams(query).toString();
          const response = await context.request(`${path}?${search}`, { headers: { cookie } });
          expect(response.status).toBeLessThan(500);
          if (response.status >= 400) expect(response.headers.get("content-type")).toBe("application/problem+json");
        },
      ),
      { numRuns: RUNS },
    );
  });
});
