import { describe, expect, test } from "bun:test";
import type { LedgerTransaction } from "../store";
import type { LedgerEntry } from "./debit-plan";
import { entriesOf, ledgerRows, PACKED_MAX_ENTRIES, PACKED_SPAN_MS, pageOfEntries, type StoredLedgerRow } from "./packed-ledger";

type Entry = LedgerEntry;

const T = 1_800_000_000_000;

function entry(id: string, createdAt: number, overrides: Partial<Entry> = {}): Entry {
  return {
    id,
    organizationId: "org_a",
    amount: -1,
    balanceAfter: 0,
    bucketId: "bkt_a",
    keyId: "key_a",
    requestId: `req_${id}`,
    gtin: "04006381333931",
    description: "look-up",
    createdAt,
    ...overrides,
  };
}

describe("ledgerRows", () => {
  test("unpacked: a plain row per entry, in the plan's order", () => {
    const rows = ledgerRows([entry("b", T + 1), entry("a", T)], false);
    expect(rows.map((row) => [row.id, row.lookUps, row.firstCreatedAt])).toEqual([
      ["b", null, null],
      ["a", null, null],
    ]);
  });

  test("packed: one row per organization with the sum, the first entry's id, the lowest balance and the span of times", () => {
    const entries = [
      entry("c", T + 20, { amount: -2, balanceAfter: 5 }),
      entry("a", T, { amount: -1, balanceAfter: 7, keyId: "key_b" }),
      entry("b", T + 10, { amount: -3, balanceAfter: 4 }),
      entry("z", T + 5, { organizationId: "org_b", balanceAfter: 9 }),
    ];
    const [packed, lone] = ledgerRows(entries, true);
    expect(packed).toMatchObject({
      id: "a",
      organizationId: "org_a",
      amount: -6,
      balanceAfter: 4,
      bucketId: "bkt_a",
      keyId: null,
      requestId: null,
      gtin: null,
      description: "3 look-ups",
      createdAt: T + 20,
      firstCreatedAt: T,
    });
    expect(packed!.lookUps!.map((e) => [e.id, e.amount, e.balanceAfter, e.keyId, e.requestId, e.createdAt])).toEqual([
      ["a", -1, 7, "key_b", "req_a", T],
      ["b", -3, 4, "key_a", "req_b", T + 10],
      ["c", -2, 5, "key_a", "req_c", T + 20],
    ]);
    // A run of one stays a plain row.
    expect(lone).toMatchObject({ id: "z", organizationId: "org_b", requestId: "req_z", lookUps: null, firstCreatedAt: null });
  });

  test("a row holds entries at most PACKED_SPAN_MS after its first, and at most PACKED_MAX_ENTRIES", () => {
    const spanned = ledgerRows([entry("a", T), entry("b", T + PACKED_SPAN_MS), entry("c", T + PACKED_SPAN_MS + 1), entry("d", T + PACKED_SPAN_MS + 2)], true);
    expect(spanned.map((row) => row.lookUps?.map((e) => e.id) ?? row.id)).toEqual([
      ["a", "b"],
      ["c", "d"],
    ]);
    const many = Array.from({ length: PACKED_MAX_ENTRIES + 2 }, (_, i) => entry(`e${String(i).padStart(5, "0")}`, T));
    expect(ledgerRows(many, true).map((row) => row.lookUps?.length ?? 1)).toEqual([PACKED_MAX_ENTRIES, 2]);
  });
});

/** A stored row from entries: packed when there are several. */
function stored(entries: Entry[]): StoredLedgerRow {
  const [row] = ledgerRows(entries, true);
  const { firstCreatedAt, lookUps, ...plain } = row!;
  return { ...plain, type: "usage", lookUps } as StoredLedgerRow;
}

/** Rows as the store returns them: newest first on (createdAt, id), after a row cursor, `count` at most; every read recorded. */
function fetcherOf(rows: StoredLedgerRow[]) {
  const ordered = rows.toSorted((a, b) => b.createdAt - a.createdAt || (a.id < b.id ? 1 : -1));
  const reads: number[] = [];
  const fetch = async (after: { createdAt: number; id: string } | null, count: number) => {
    const start = after === null ? 0 : ordered.findIndex((row) => row.createdAt === after.createdAt && row.id === after.id) + 1;
    const page = ordered.slice(start, start + count);
    reads.push(page.length);
    return page;
  };
  return { fetch, reads };
}

const ids = (entries: LedgerTransaction[]) => entries.map((e) => e.id);

describe("pageOfEntries", () => {
  // Three packed rows whose spans overlap and a plain row between them.
  const rows = [
    stored([entry("a1", T), entry("a2", T + 30), entry("a3", T + 60)]),
    stored([entry("b1", T + 10), entry("b2", T + 40)]),
    stored([entry("p", T + 35)]),
    stored([entry("c1", T + 50), entry("c2", T + 70)]),
  ];

  test("entries newest first across overlapping rows, a page at a time", async () => {
    const all = ["c2", "a3", "c1", "b2", "p", "a2", "b1", "a1"];
    expect(ids(await pageOfEntries(100, { before: null, from: undefined }, fetcherOf(rows).fetch))).toEqual(all);
    expect(ids(await pageOfEntries(3, { before: null, from: undefined }, fetcherOf(rows).fetch))).toEqual(all.slice(0, 3));
    expect(ids(await pageOfEntries(3, { before: { createdAt: T + 50, id: "c1" }, from: undefined }, fetcherOf(rows).fetch))).toEqual(["b2", "p", "a2"]);
    expect(ids(await pageOfEntries(3, { before: { createdAt: T + 30, id: "a2" }, from: T + 5 }, fetcherOf(rows).fetch))).toEqual(["b1"]);
  });

  test("reads a row more than the page, and more only while an unread row can hold a newer entry", async () => {
    // Rows dated at distinct times (packed ones here): the page's rows and one more fill it (c2 and a3
    // are newer than b's T + 40).
    const once = fetcherOf([...rows, stored([entry("d1", T - 100), entry("d2", T - 90)])]);
    expect(ids(await pageOfEntries(2, { before: null, from: undefined }, once.fetch))).toEqual(["c2", "a3"]);
    expect(once.reads).toEqual([3]);
    // Plain rows at distinct times: the third row's time settles the two newer ones.
    const plain = fetcherOf([3, 2, 1, 0].map((age) => stored([entry(`p${age}`, T - age)])));
    expect(ids(await pageOfEntries(2, { before: null, from: undefined }, plain.fetch))).toEqual(["p0", "p1"]);
    expect(plain.reads).toEqual([3]);
    // Fewer rows than a round reads: they are all there is, so nothing more is read.
    const few = fetcherOf(rows.slice(0, 2));
    expect(ids(await pageOfEntries(2, { before: null, from: undefined }, few.fetch))).toEqual(["a3", "b2"]);
    expect(few.reads).toEqual([2]);
    // Rows sharing their time: an unread row at that time may hold an entry that sorts first.
    const tied = fetcherOf([stored([entry("q1", T + 70)]), stored([entry("q2", T + 70)]), stored([entry("q3", T + 70)]), stored([entry("o", T)])]);
    expect(ids(await pageOfEntries(2, { before: null, from: undefined }, tied.fetch))).toEqual(["q3", "q2"]);
    expect(tied.reads).toEqual([3, 1]);
  });

  test("entriesOf: a plain row is itself, a packed row its look-ups in its organization", () => {
    const [packed, plain] = [rows[0]!, rows[2]!];
    expect(entriesOf(plain)).toEqual([expect.objectContaining({ id: "p", requestId: "req_p" })]);
    expect(entriesOf(packed).map((e) => [e.id, e.organizationId, e.type, e.requestId])).toEqual([
      ["a1", "org_a", "usage", "req_a1"],
      ["a2", "org_a", "usage", "req_a2"],
      ["a3", "org_a", "usage", "req_a3"],
    ]);
  });
});
