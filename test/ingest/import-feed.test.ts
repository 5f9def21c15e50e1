import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { Store } from "../../src/db/store";
import { gtin13 } from "../../src/modules/ingest/demo-data";
import { formatFromFileName, importFeed, type ImportReport } from "../../src/modules/ingest/import-feed";
import { openTestStore } from "../support/context";

const NOW = Date.parse("2026-11-22T10:00:00.000Z");
const PEN = "04006381333931";
const UPC = "00036000291452";

let store: Store;

beforeEach(async () => {
  store = await openTestStore();
});

afterEach(async () => {
  await store.close();
});

function streamOf(text: string): ReadableStream<Uint8Array> {
  return new Blob([text]).stream();
}

function ndjson(...records: Array<Record<string, unknown> | string>): string {
  return `${records.map((record) => (typeof record === "string" ? record : JSON.stringify(record))).join("\n")}\n`;
}

function importNDJSON(text: string, batchSize?: number): Promise<ImportReport> {
  return importFeed(store, streamOf(text), { format: "ndjson", now: NOW, batchSize });
}

function offer(gtin: string, merchantId: string, price: string, observedAt: string): Record<string, unknown> {
  return { gtin, merchantId, price, currency: "EUR", observedAt };
}

describe("importFeed", () => {
  test("a half-bad file keeps its good rows and reports each bad one on its line, counting from 1", async () => {
    const report = await importNDJSON(
      ndjson(
        offer("4006381333931", "shop-a", "12.99", "2026-11-22T09:00:00Z"),
        "{not json",
        offer("4006381333932", "shop-a", "1.00", "2026-11-22T09:00:00Z"),
        "",
        offer("036000291452", "shop-b", "12,99", "2026-11-22T09:00:00Z"),
        offer("036000291452", "shop-a", "2.50", "2026-11-22T09:00:00Z"),
      ),
    );

    expect(report).toEqual({
      read: 5,
      products: 2,
      offers: 2,
      rejected: [
        { line: 2, error: "not valid JSON" },
        { line: 3, error: 'gtin: "4006381333932" is not a valid GTIN' },
        { line: 5, error: 'price: "12,99" is not a decimal amount' },
      ],
      rejectedCount: 3,
    });
    expect((await store.findProductWithOffers(PEN))?.offers.map((row) => row.priceAmount)).toEqual([1299]);
    expect((await store.findProductWithOffers(UPC))?.offers.map((row) => [row.merchantId, row.priceAmount])).toEqual([["shop-a", 250]]);
    expect(await store.countProducts()).toBe(2);
  });

  test("a rejected record writes nothing, not even its product", async () => {
    const report = await importNDJSON(ndjson({ ...offer("4006381333931", "shop-a", "free", "2026-11-22T09:00:00Z"), title: "Pen" }));
    expect(report.rejected).toHaveLength(1);
    expect(await store.findProductWithOffers(PEN)).toBeNull();
  });

  test("a bad record in the middle of a batch does not keep the rest of its batch or later batches out", async () => {
    const gtins = ["4006381333931", "036000291452", "96385074", "5901234123457", "10614141000415"];
    const records = gtins.map((gtin) => offer(gtin, "shop-a", "1.00", "2026-11-22T09:00:00Z"));
    const report = await importNDJSON(ndjson(records[0]!, records[1]!, { gtin: "bad" }, records[2]!, records[3]!, records[4]!), 2);

    expect(report).toMatchObject({ read: 6, products: 5, offers: 5, rejected: [{ line: 3 }] });
    expect(await store.countProducts()).toBe(5);
  });

  test("product-only records create products with no offers", async () => {
    const report = await importNDJSON(ndjson({ gtin: "4006381333931", title: "Stabilo point 88", brand: "Stabilo" }));

    expect(report).toEqual({ read: 1, products: 1, offers: 0, rejected: [], rejectedCount: 0 });
    expect(await store.findProductWithOffers(PEN)).toEqual({
      product: { gtin: PEN, title: "Stabilo point 88", brand: "Stabilo", imageUrl: null },
      offers: [],
    });
  });

  test("a later product-only record updates the product and leaves its offers alone", async () => {
    await importNDJSON(ndjson(offer("4006381333931", "shop-a", "12.99", "2026-11-22T09:00:00Z")));
    await importNDJSON(ndjson({ gtin: "4006381333931", title: "Renamed" }));

    const found = await store.findProductWithOffers(PEN);
    expect(found?.product.title).toBe("Renamed");
    expect(found?.offers.map((row) => row.priceAmount)).toEqual([1299]);
  });

  test("an older observedAt does not overwrite a newer offer, and a newer one does", async () => {
    await importNDJSON(ndjson(offer("4006381333931", "shop-a", "10.00", "2026-11-22T09:00:00Z")));

    await importNDJSON(ndjson(offer("4006381333931", "shop-a", "8.00", "2026-11-22T08:00:00Z")));
    const afterOlder = await store.findProductWithOffers(PEN);
    expect(afterOlder?.offers.map((row) => [row.priceAmount, row.observedAt])).toEqual([[1000, Date.parse("2026-11-22T09:00:00Z")]]);

    await importNDJSON(ndjson(offer("4006381333931", "shop-a", "11.50", "2026-11-22T09:30:00Z")));
    const afterNewer = await store.findProductWithOffers(PEN);
    expect(afterNewer?.offers.map((row) => [row.priceAmount, row.observedAt])).toEqual([[1150, Date.parse("2026-11-22T09:30:00Z")]]);
  });

  test("the newer of two records in one file wins whatever their order", async () => {
    await importNDJSON(
      ndjson(offer("4006381333931", "shop-a", "11.50", "2026-11-22T09:30:00Z"), offer("4006381333931", "shop-a", "10.00", "2026-11-22T09:00:00Z")),
    );
    expect((await store.findProductWithOffers(PEN))?.offers.map((row) => row.priceAmount)).toEqual([1150]);
  });

  test("records of one product in one batch add up as if applied one by one: given fields win, absent ones keep earlier values", async () => {
    const report = await importNDJSON(
      ndjson(
        { gtin: "4006381333931", title: "First", brand: "Stabilo", imageUrl: "https://img.example/pen.png" },
        { gtin: "4006381333931", title: "Second" },
        { ...offer("4006381333931", "shop-a", "2.00", "2026-11-22T08:00:00Z"), merchantName: "Shop A" },
        offer("4006381333931", "shop-a", "1.50", "2026-11-22T09:00:00Z"),
      ),
    );

    expect(report).toMatchObject({ read: 4, products: 1, offers: 2, rejected: [] });
    expect(await store.findProductWithOffers(PEN)).toEqual({
      product: { gtin: PEN, title: "Second", brand: "Stabilo", imageUrl: "https://img.example/pen.png" },
      offers: [expect.objectContaining({ merchantId: "shop-a", merchantName: "Shop A", priceAmount: 150 })],
    });
  });

  test("4006381333931 and 04006381333931 are the same product", async () => {
    const report = await importNDJSON(
      ndjson(
        { ...offer("4006381333931", "shop-a", "12.99", "2026-11-22T09:00:00Z"), title: "Pen" },
        offer("04006381333931", "shop-b", "11.99", "2026-11-22T09:00:00Z"),
      ),
    );

    expect(report).toMatchObject({ products: 1, offers: 2 });
    expect(await store.countProducts()).toBe(1);
    const found = await store.findProductWithOffers(PEN);
    expect(found?.product.title).toBe("Pen");
    expect(found?.offers.map((row) => row.merchantId).sort()).toEqual(["shop-a", "shop-b"]);
  });

  test("a CSV feed with a header and quoted commas is imported", async () => {
    const csv = [
      "gtin,title,brand,merchantId,merchantName,price,currency,shipping,availability,observedAt",
      '4006381333931,"Stabilo point 88, fine, 0.4 mm","Stabilo",shop-a,"Shop A, Berlin",12.99,EUR,,in_stock,2026-11-22T09:00:00Z',
      "",
    ].join("\r\n");
    const report = await importFeed(store, streamOf(csv), { format: "csv", now: NOW });

    expect(report).toEqual({ read: 1, products: 1, offers: 1, rejected: [], rejectedCount: 0 });
    expect(await store.findProductWithOffers(PEN)).toEqual({
      product: { gtin: PEN, title: "Stabilo point 88, fine, 0.4 mm", brand: "Stabilo", imageUrl: null },
      offers: [
        {
          merchantId: "shop-a",
          merchantName: "Shop A, Berlin",
          priceAmount: 1299,
          currency: "EUR",
          shippingAmount: null,
          availability: "in_stock",
          condition: "new",
          url: null,
          observedAt: Date.parse("2026-11-22T09:00:00Z"),
        },
      ],
    });
  });

  test("CSV rejections carry the line the row starts on, past the header and quoted line breaks", async () => {
    const csv = 'gtin,title,merchantId,price,currency,observedAt\n4006381333931,"two\nlines",shop-a,oops,EUR,2026-11-22T09:00:00Z\n96385074,x\n';
    const report = await importFeed(store, streamOf(csv), { format: "csv", now: NOW });

    expect(report).toEqual({
      read: 2,
      products: 0,
      offers: 0,
      rejected: [
        { line: 2, error: 'price: "oops" is not a decimal amount' },
        { line: 4, error: "row has 2 fields, the header has 6" },
      ],
      rejectedCount: 2,
    });
  });

  test("NDJSON and CSV give the same result for the same data", async () => {
    const records = [
      {
        gtin: "4006381333931",
        title: 'Pen, "fine"',
        merchantId: "shop-a",
        price: "12.99",
        currency: "EUR",
        shipping: "4.90",
        observedAt: "2026-11-22T09:00:00Z",
      },
      { gtin: "036000291452", title: "Cola", merchantId: "shop-b", price: "1.5", currency: "EUR", shipping: "", observedAt: "2026-11-22T08:00:00+01:00" },
      { gtin: "96385074", title: "Product only", merchantId: "", price: "", currency: "", shipping: "", observedAt: "" },
      { gtin: "036000291452", title: "Cola", merchantId: "shop-b", price: "9,99", currency: "EUR", shipping: "", observedAt: "2026-11-22T09:00:00Z" },
    ];
    const columns = Object.keys(records[0]!);
    const csv = [columns.join(","), ...records.map((record) => Object.values(record).map(toCSVField).join(","))].join("\n");

    const ndjsonReport = await importNDJSON(ndjson(...records));
    const ndjsonProducts = await findAll(store, [PEN, UPC, "00000096385074"]);
    const csvStore = await openTestStore();
    try {
      const csvReport = await importFeed(csvStore, streamOf(csv), { format: "csv", now: NOW });
      // CSV lines are one further down because of the header.
      expect(csvReport).toEqual({ ...ndjsonReport, rejected: ndjsonReport.rejected.map((entry) => ({ ...entry, line: entry.line + 1 })) });
      expect(await findAll(csvStore, [PEN, UPC, "00000096385074"])).toEqual(ndjsonProducts);
    } finally {
      await csvStore.close();
    }
    expect(ndjsonReport).toMatchObject({ read: 4, products: 3, offers: 2, rejected: [{ line: 4 }] });
    expect(ndjsonProducts.every((found) => found !== null)).toBe(true);
  });
});

// The SQLite store writes up to 100 rows per statement: these feeds span several statements, and
// batches of several hundred records, so the boundaries between both fall inside them.
describe("importFeed, feeds of many rows", () => {
  const gtinOf = (index: number) => gtin13(`400${String(index).padStart(9, "0")}`);
  /** The 14-digit form the store keys products by. */
  const storedGTIN = (index: number) => `0${gtinOf(index)}`;
  const priced = (index: number, price: string, observedAt = "2026-11-22T09:00:00Z") => offer(gtinOf(index), `shop-${index % 3}`, price, observedAt);
  const history = async (index: number) =>
    (await store.listPriceHistory(storedGTIN(index))).map((entry) => [entry.priceAmount, entry.observedAt - Date.parse("2026-11-22T09:00:00Z")]);

  test("a bad row inside a statement and a GTIN repeated across statements: every good row written, each change kept in order", async () => {
    const lines: Array<Record<string, unknown> | string> = [];
    for (let index = 0; index < 450; index++) lines.push(priced(index, `${1 + index}.00`));
    lines[150] = { ...priced(150, "1.00"), currency: "euro" };
    lines[260] = "{";
    // Offer 7 again in a later statement of the same batch, at a newer time and price, then an older
    // observation of it that the offer does not take.
    lines.push(priced(7, "99.00", "2026-11-22T09:30:00Z"), priced(7, "5.00", "2026-11-22T08:00:00Z"));

    for (const batchSize of [1000, 128]) {
      const batchStore = await openTestStore();
      try {
        const report = await importFeed(batchStore, streamOf(ndjson(...lines)), { format: "ndjson", now: NOW, batchSize });
        expect(report).toEqual({
          read: 452,
          products: 448,
          offers: 450,
          rejected: [
            { line: 151, error: 'currency: "euro" is not an ISO 4217 code' },
            { line: 261, error: "not valid JSON" },
          ],
          rejectedCount: 2,
        });
        expect(await batchStore.countProducts()).toBe(448);
        expect((await batchStore.findProductWithOffers(storedGTIN(449)))?.offers.map((row) => row.priceAmount)).toEqual([45000]);
        expect(await batchStore.findProductWithOffers(storedGTIN(150))).toBeNull();
        expect((await batchStore.findProductWithOffers(storedGTIN(7)))?.offers.map((row) => row.priceAmount)).toEqual([9900]);
        expect((await batchStore.listPriceHistory(storedGTIN(7))).map((entry) => entry.priceAmount)).toEqual([800, 9900]);
      } finally {
        await batchStore.close();
      }
    }
  });

  test("importing the same feed again adds no history; a changed price or availability adds one entry", async () => {
    const feed = (price: (index: number) => string, observedAt: string, availability = "in_stock") =>
      ndjson(...Array.from({ length: 250 }, (_, index) => ({ ...priced(index, price(index), observedAt), availability })));
    await importNDJSON(feed((index) => `${1 + index}.00`, "2026-11-22T09:00:00Z"));
    await importNDJSON(feed((index) => `${1 + index}.00`, "2026-11-22T09:10:00Z"));
    expect(await history(3)).toEqual([[400, 0]]);

    await importNDJSON(feed((index) => (index === 3 ? "3.50" : `${1 + index}.00`), "2026-11-22T09:20:00Z"));
    await importNDJSON(feed((index) => (index === 3 ? "3.50" : `${1 + index}.00`), "2026-11-22T09:30:00Z", "out_of_stock"));
    expect(await history(3)).toEqual([
      [400, 0],
      [350, 1_200_000],
      [350, 1_800_000],
    ]);
    expect(await history(4)).toEqual([
      [500, 0],
      [500, 1_800_000],
    ]);
  });

  test("duplicate GTIN rows within one batch: the product takes the fields given last, each merchant keeps its offer", async () => {
    const lines = Array.from({ length: 300 }, (_, index) => ({
      ...offer(gtinOf(index % 120), `shop-${index % 7}`, `${index}.00`, "2026-11-22T09:00:00Z"),
      title: `Title ${index}`,
    }));
    const report = await importNDJSON(ndjson(...lines));
    expect(report).toMatchObject({ read: 300, products: 120, offers: 300, rejectedCount: 0 });
    const found = await store.findProductWithOffers(storedGTIN(5));
    // Rows 5, 125 and 245 are GTIN 5, at shops 5, 6 and 0.
    expect(found?.product.title).toBe("Title 245");
    expect(found?.offers.map((row) => [row.merchantId, row.priceAmount])).toEqual([
      ["shop-0", 24500],
      ["shop-5", 500],
      ["shop-6", 12500],
    ]);
  });
});

describe("formatFromFileName", () => {
  test.each([
    ["feed.csv", "csv"],
    ["FEED.CSV", "csv"],
    ["feed.ndjson", "ndjson"],
    ["feed.jsonl", "ndjson"],
    ["feed", "ndjson"],
    ["-", "ndjson"],
  ])("%s is read as %s", (name, format) => {
    expect(formatFromFileName(name)).toBe(format as "csv" | "ndjson");
  });
});

function toCSVField(value: string): string {
  return /[",\r\n]/.test(value) ? `"${value.replaceAll('"', '""')}"` : value;
}

function findAll(target: Store, gtins: string[]): Promise<unknown[]> {
  return Promise.all(gtins.map((gtin) => target.findProductWithOffers(gtin)));
}
