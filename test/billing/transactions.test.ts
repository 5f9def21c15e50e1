import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { addProduct, json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, HOUR, otherOrganization } from "./fixtures";
import { securityTests } from "../support/security";

const GTIN = "04006381333931";
let fx: BillingFixture;

beforeEach(async () => {
  fx = await billingFixture();
  await addProduct(fx.context, GTIN, [{ merchantId: "m", price: 999, ageMs: 0 }]);
});
afterEach(async () => {
  await fx.context.close();
});

type Txn = { id: string; type: string; amount: number; balanceAfter: number; createdAt: string };

function transactions(query = "", headers: Record<string, string> = fx.session.headers): Promise<Response> {
  return fx.context.request(`${BILLING}/transactions${query}`, { headers });
}

async function grant(amount: number): Promise<void> {
  const now = fx.context.clock.now();
  await fx.context.store.grantCredits({
    organizationId: fx.org.organizationId,
    source: "grant",
    type: "grant",
    amount,
    expiresAt: null,
    description: "test grant",
    now,
  });
}

async function lookUp(): Promise<string> {
  const response = await fx.context.request(`/api/v1/products/${GTIN}/price`, { headers: fx.org.auth });
  expect(response.status).toBe(200);
  return (await json(response)).meta.requestId;
}

/** Every page of a listing, following nextCursor. */
async function allPages(query: string, limit: number): Promise<Txn[][]> {
  const pages: Txn[][] = [];
  let cursor: string | null = null;
  do {
    const separator = query ? "&" : "";
    const body: { items: Txn[]; nextCursor: string | null } = await json(
      await transactions(`?${query}${separator}limit=${limit}${cursor ? `&cursor=${cursor}` : ""}`),
    );
    pages.push(body.items);
    cursor = body.nextCursor;
  } while (cursor !== null);
  return pages;
}

describe("GET /api/v1/customer/billing/transactions", () => {
  test("it lists ledger rows newest first with every field, usage rows naming key, request and GTIN", async () => {
    await grant(5);
    fx.context.clock.advance(1000);
    const requestId = await lookUp();
    const response = await transactions();
    expect(response.status).toBe(200);
    const body = await json(response);
    expect(body.nextCursor).toBeNull();
    expect(body.items).toHaveLength(2);
    expect(body.items[0]).toEqual({
      id: expect.stringMatching(/^txn_/),
      type: "usage",
      amount: -1,
      balanceAfter: 4,
      bucketId: expect.stringMatching(/^bkt_/),
      keyId: fx.org.keyId,
      requestId,
      gtin: GTIN,
      description: `Price look-up ${GTIN}`,
      createdAt: "2026-11-22T10:00:01.000Z",
    });
    expect(body.items[1]).toMatchObject({
      type: "grant",
      amount: 5,
      balanceAfter: 5,
      keyId: null,
      requestId: null,
      gtin: null,
      createdAt: "2026-11-22T10:00:00.000Z",
    });
  });

  test("an API key of the organization lists the same rows", async () => {
    await grant(2);
    await lookUp();
    const byKey = await transactions("", fx.org.auth);
    expect(byKey.status).toBe(200);
    expect(await json(byKey)).toEqual(await json(await transactions()));
  });

  test("pages have no overlap and no gap, newest first, whether rows share a millisecond or not", async () => {
    await grant(40);
    for (let i = 0; i < 30; i++) {
      await lookUp();
      if (i % 3 === 0) fx.context.clock.advance(7);
    }
    const pages = await allPages("", 7);
    expect(pages.map((page) => page.length)).toEqual([7, 7, 7, 7, 3]);
    const ids = pages.flat().map((t) => t.id);
    expect(new Set(ids).size).toBe(31);
    const everything = (await json(await transactions("?limit=100"))).items.map((t: Txn) => t.id);
    expect(ids).toEqual(everything);
    // Newest first: balanceAfter climbs back to the grant as we walk back in time.
    expect(pages.flat().map((t) => t.balanceAfter)).toEqual([...Array.from({ length: 30 }, (_, i) => 10 + i), 40]);
  });

  test("rows added while a client pages through do not shift the pages it has not read yet", async () => {
    await grant(100);
    for (let i = 0; i < 12; i++) await lookUp();
    const before = (await json(await transactions("?limit=100"))).items.map((t: Txn) => t.id);
    const first = await json(await transactions("?limit=5"));
    for (let i = 0; i < 4; i++) await lookUp();
    fx.context.clock.advance(1);
    await lookUp();
    const second = await json(await transactions(`?limit=5&cursor=${first.nextCursor}`));
    expect(first.items.map((t: Txn) => t.id)).toEqual(before.slice(0, 5));
    expect(second.items.map((t: Txn) => t.id)).toEqual(before.slice(5, 10));
  });

  test("type filters to one kind of transaction, and pages through it", async () => {
    await grant(3);
    await grant(4);
    for (let i = 0; i < 5; i++) await lookUp();
    const usage = await allPages("type=usage", 2);
    expect(usage.flat().map((t) => t.type)).toEqual(["usage", "usage", "usage", "usage", "usage"]);
    const grants = (await json(await transactions("?type=grant"))).items;
    expect(grants.map((t: Txn) => t.amount)).toEqual([4, 3]);
    expect((await json(await transactions("?type=refund"))).items).toEqual([]);
  });

  test("from is inclusive and to exclusive, alone, together and with a type", async () => {
    const t0 = fx.context.clock.now();
    await grant(10); // t0
    fx.context.clock.advance(HOUR);
    await lookUp(); // t0 + 1h
    fx.context.clock.advance(HOUR);
    await grant(1); // t0 + 2h
    fx.context.clock.advance(HOUR);
    await lookUp(); // t0 + 3h
    const iso = (ms: number) => new Date(ms).toISOString();
    const amounts = async (query: string) => (await json(await transactions(query))).items.map((t: Txn) => `${t.type}${t.amount}`);
    expect(await amounts(`?from=${iso(t0 + HOUR)}`)).toEqual(["usage-1", "grant1", "usage-1"]);
    expect(await amounts(`?to=${iso(t0 + 2 * HOUR)}`)).toEqual(["usage-1", "grant10"]);
    expect(await amounts(`?from=${iso(t0 + HOUR)}&to=${iso(t0 + 3 * HOUR)}`)).toEqual(["grant1", "usage-1"]);
    expect(await amounts(`?type=usage&from=${iso(t0 + 2 * HOUR)}`)).toEqual(["usage-1"]);
    expect(await amounts(`?type=grant&to=${iso(t0 + 1)}`)).toEqual(["grant10"]);
    expect(await amounts(`?from=${iso(t0 + 4 * HOUR)}`)).toEqual([]);
  });

  test("a date range keeps its bounds across pages", async () => {
    await grant(20);
    for (let i = 0; i < 10; i++) {
      fx.context.clock.advance(1000);
      await lookUp();
    }
    const from = new Date(Date.parse("2026-11-22T10:00:03.000Z")).toISOString();
    const to = new Date(Date.parse("2026-11-22T10:00:08.000Z")).toISOString();
    const pages = await allPages(`from=${from}&to=${to}`, 2);
    expect(pages.flat().map((t) => t.createdAt)).toEqual(["07", "06", "05", "04", "03"].map((s) => `2026-11-22T10:00:${s}.000Z`));
  });

  const invalid: Array<[string, string]> = [
    ["an unknown type", "?type=bonus"],
    ["a from that is not a date-time", "?from=yesterday"],
    ["a to that is not a date-time", "?to=2026-13-45"],
    ["from after to", "?from=2026-11-22T11:00:00.000Z&to=2026-11-22T10:00:00.000Z"],
    ["a cursor this service did not make", "?cursor=bm90LWEtY3Vyc29y"],
    ["a limit of 0", "?limit=0"],
    ["a limit over 100", "?limit=101"],
  ];
  for (const [what, query] of invalid) {
    test(`${what} is 400 invalid-parameter`, async () => {
      const response = await transactions(query);
      expect(response.status).toBe(400);
      expect(response.headers.get("content-type")).toStartWith("application/problem+json");
      expect((await json(response)).type).toEndWith("/problems/invalid-parameter");
    });
  }

  test("another organization sees only its own rows, even with this organization's cursor", async () => {
    await grant(5);
    for (let i = 0; i < 3; i++) await lookUp();
    const other = await otherOrganization(fx.context, 2);
    const mine = await json(await transactions("?limit=1"));
    for (const headers of [other.session.headers, other.org.auth]) {
      const theirs = await json(await transactions("", headers));
      expect(theirs.items.map((t: Txn) => t.amount)).toEqual([2]);
      const withMyCursor = await json(await transactions(`?cursor=${mine.nextCursor}`, headers));
      // A cursor is a position, not a capability: it can only ever select the caller's own rows.
      expect(withMyCursor.items.every((t: Txn) => t.amount === 2)).toBe(true);
    }
  });

  describe("as CSV", () => {
    const HEADER = "id,type,amount,balanceAfter,bucketId,keyId,requestId,gtin,description,createdAt";

    test("format=csv streams every selected row, newest first, the same rows as the JSON pages", async () => {
      await grant(150);
      for (let i = 0; i < 120; i++) {
        await lookUp();
        if (i % 7 === 0) fx.context.clock.advance(3);
      }
      const response = await transactions("?format=csv&limit=5");
      expect(response.status).toBe(200);
      expect(response.headers.get("content-type")).toBe("text/csv; charset=utf-8");
      expect(response.headers.get("content-disposition")).toBe('attachment; filename="transactions.csv"');
      expect(response.headers.get("vary")).toBe("Accept");
      expect(response.headers.get("x-request-id")).toStartWith("req_");
      expect(response.headers.get("content-language")).toBe("en");
      const lines = (await response.text()).split("\r\n");
      expect(lines.at(-1)).toBe("");
      expect(lines[0]).toBe(HEADER);
      const rows = lines.slice(1, -1);
      expect(rows).toHaveLength(121);
      const ids = (await allPages("", 100)).flat().map((t) => t.id);
      expect(rows.map((line) => line.split(",")[0])).toEqual(ids);
      const first = (await json(await transactions("?limit=1"))).items[0];
      expect(rows[0]).toBe(`${first.id},usage,-1,30,${first.bucketId},${fx.org.keyId},${first.requestId},${GTIN},Price look-up ${GTIN},${first.createdAt}`);
      expect(rows.at(-1)).toMatch(/^txn_\w+,grant,150,150,bkt_\w+,,,,test grant,2026-11-22T10:00:00\.000Z$/);
    });

    test("Accept: text/csv answers CSV; JSON stays the default, and wins a tie", async () => {
      await grant(3);
      const csv = await transactions("", { ...fx.session.headers, accept: "text/csv" });
      expect(csv.headers.get("content-type")).toBe("text/csv; charset=utf-8");
      expect((await csv.text()).split("\r\n")[0]).toBe(HEADER);
      const tie = await transactions("", { ...fx.session.headers, accept: "application/json, text/csv" });
      expect(tie.headers.get("content-type")).toStartWith("application/json");
      const forced = await transactions("?format=json", { ...fx.session.headers, accept: "text/csv" });
      expect(forced.headers.get("content-type")).toStartWith("application/json");
      expect((await json(forced)).items).toHaveLength(1);
    });

    test("filters apply as in JSON, descriptions follow the language, and a bad filter is still a problem", async () => {
      await grant(10);
      fx.context.clock.advance(HOUR);
      await lookUp();
      await lookUp();
      const usageOnly = (await (await transactions("?format=csv&type=usage")).text()).split("\r\n").slice(1, -1);
      expect(usageOnly.map((line) => line.split(",")[1])).toEqual(["usage", "usage"]);
      const french = await (await transactions("?format=csv&type=usage", { ...fx.session.headers, "accept-language": "fr" })).text();
      expect(french).toContain("Consultation de prix");
      const empty = await (await transactions("?format=csv&type=refund")).text();
      expect(empty).toBe(`${HEADER}\r\n`);
      const bad = await transactions("?format=csv&from=yesterday");
      expect(bad.status).toBe(400);
      expect(bad.headers.get("content-type")).toStartWith("application/problem+json");
    });

    test("an API key answers CSV too, with only its organization's rows", async () => {
      await grant(4);
      const other = await otherOrganization(fx.context, 9);
      const text = await (await transactions("?format=csv", other.org.auth)).text();
      expect(
        text
          .split("\r\n")
          .slice(1, -1)
          .map((line) => line.split(",")[2]),
      ).toEqual(["9"]);
    });

    test("an unknown format is 400 invalid-parameter", async () => {
      const response = await transactions("?format=xml");
      expect(response.status).toBe(400);
      expect((await json(response)).type).toEndWith("/problems/invalid-parameter");
    });
  });

  securityTests({ method: "GET", path: () => `${BILLING}/transactions`, accepts: "sessionOrKey" }, () => fx.context);
});

describe("ledger descriptions in the customer's language", () => {
  test("in French the service's own descriptions are French, an operator's stays as written, and the answer says Content-Language: fr", async () => {
    await grant(5);
    const now = fx.context.clock.now();
    await fx.context.store.grantCredits({
      organizationId: fx.org.organizationId,
      source: "pack",
      type: "purchase",
      amount: 1000,
      expiresAt: null,
      description: 'Pack "1,000 credits": 1,000 credits',
      now,
    });
    await lookUp();
    const response = await transactions("", { ...fx.session.headers, "accept-language": "fr" });
    expect(response.headers.get("content-language")).toBe("fr");
    const descriptions = ((await json(response)).items as Array<{ description: string }>).map((item) => item.description);
    expect(descriptions).toContain(`Consultation de prix ${GTIN}`);
    expect(descriptions).toContain("Pack « 1\u202f000 crédits » : 1\u202f000 crédits");
    expect(descriptions).toContain("test grant");
    const english = ((await json(await transactions())).items as Array<{ description: string }>).map((item) => item.description);
    expect(english).toContain(`Price look-up ${GTIN}`);
  });
});
