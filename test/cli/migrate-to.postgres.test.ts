import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SQLiteStore } from "../../src/db/sqlite-store";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { hashSecret } from "../../src/lib/crypto";
import { main } from "../../src/cli/program";
import { rotateApiKey } from "../../src/modules/keys/service";
import { openStore } from "../../src/services";
import { createTestDatabase, TEST_DATABASE_URL, type TestDatabase } from "../support/context";

// `migrate --to`: a SQLite database with every kind of row, copied into an empty PostgreSQL schema.
// PostgreSQL-only (see bunfig.toml): scripts/test.ts runs it.
if (TEST_DATABASE_URL === null) throw new Error("this file needs TEST_DATABASE_URL; run it through `npm test` (scripts/test.ts)");

let directory: string;
let sqliteUrl: string;
let target: TestDatabase;
let seed: { organizationId: string; keyId: string; clearKey: string; freshGTIN: string };
let rotatedClearKey: string;

async function cli(...args: string[]): Promise<{ code: number; output: string }> {
  const printed: string[] = [];
  const code = await main([...args, "--database-url", sqliteUrl], (text) => printed.push(text));
  return { code, output: printed.join("\n") };
}

beforeAll(async () => {
  directory = mkdtempSync(join(tmpdir(), "price-copy-"));
  sqliteUrl = `sqlite:${join(directory, "source.db")}`;
  target = await createTestDatabase();
  seed = JSON.parse((await cli("seed", "--demo", "--products", "40", "--credits", "10", "--json")).output);
  const source = SQLiteStore.open(sqliteUrl);
  try {
    // Usage, expiry and a rotated key, so the ledger, the buckets and key links all have something to copy.
    const now = Date.now();
    for (let spent = 0; spent < 3; spent++) {
      const reservation = await source.reserveCredits({
        organizationId: seed.organizationId,
        amount: 1,
        keyId: seed.keyId,
        requestId: `req_copy${spent}`,
        now,
      });
      if (!reservation.ok) throw new Error("seeded credits are missing");
      await source.commitReservation(reservation.reservationId, { gtin: seed.freshGTIN, description: "look-up", now });
    }
    await source.grantCredits({
      organizationId: seed.organizationId,
      source: "pack",
      type: "purchase",
      amount: 5,
      expiresAt: now + 1,
      description: "short",
      now,
    });
    await source.expireBuckets(now + 2);
    rotatedClearKey = (await rotateApiKey(source, { organizationId: seed.organizationId, id: seed.keyId, createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now }))!
      .clearKey;
    // A user who joined through an invitation, with a session; an invitation still open; an
    // Idempotency-Key record; a paid local subscription (order, subscription, invoice, payment,
    // grant) completed by a provider event: a row in every table.
    await source.upsertInvitation({ email: "member@example.test", organizationId: seed.organizationId, role: "member", createdAt: now });
    const joined = await source.signInSubject({
      subject: "sub-member",
      email: "member@example.test",
      name: "Member",
      newOrganizationName: "unused",
      trialCredits: 0,
      now,
    });
    if (joined.outcome !== "joined") throw new Error(`sign-in outcome ${joined.outcome}`);
    await source.insertSession({
      id: "ses_copy",
      tokenHash: "hash-of-copy",
      userId: joined.user.id,
      createdAt: now,
      expiresAt: now + 3_600_000,
      absoluteExpiresAt: now + 7_200_000,
      revokedAt: null,
    });
    await source.upsertInvitation({ email: "later@example.test", organizationId: seed.organizationId, role: "owner", createdAt: now });
    await source.claimIdempotencyKey({ scope: "copy", keyHash: "key-hash", requestHash: "request-hash", now, ttlMs: 86_400_000, abandonAfterMs: 60_000 });
    await source.createOrder({
      id: "chk_copy",
      organizationId: seed.organizationId,
      userId: joined.user.id,
      kind: "subscription",
      itemId: "plan-basic",
      itemName: "Basic",
      credits: 100,
      interval: "month",
      validityDays: null,
      amount: 900,
      currency: "EUR",
      provider: "local",
      providerRef: null,
      successUrl: null,
      cancelUrl: null,
      createdAt: now,
    });
    const completed = await source.completeOrder({
      orderId: "chk_copy",
      now,
      event: { id: "evt_copy", type: "checkout.session.completed" },
      grant: { source: "subscription", type: "subscription", amount: 100, expiresAt: now + 30 * 86_400_000, description: "Basic" },
      payment: { ref: "chk_copy", amount: 900, currency: "EUR" },
      subscription: { periodEnd: now + 30 * 86_400_000 },
      invoice: { description: "Basic", amount: 900, currency: "EUR", periodStart: now, periodEnd: now + 30 * 86_400_000 },
    });
    if (!completed.applied) throw new Error("the order was not completed");
    // A won dispute of that payment: a reversal row that moves no credits.
    await source.disputePayment({ event: null, ref: "chk_copy", dispute: { id: "dp_copy", amount: 900, status: "won" }, now });
    // A price watch, and a change of its product queued for the evaluator.
    const gtin = seed.freshGTIN.padStart(14, "0");
    await source.createWatch(
      { id: "wch_copy", organizationId: seed.organizationId, gtin, merchantId: null, trigger: "any-change", below: null, now },
      { limit: 10, freshnessWindowMs: 86_400_000 },
    );
    source.connection.run("INSERT INTO watch_changes (gtin) VALUES (?1)", [gtin]);
  } finally {
    await source.close();
  }
});

afterAll(async () => {
  rmSync(directory, { recursive: true, force: true });
  await target.drop();
});

describe("migrate --to postgres://…", () => {
  test("copies every table into the empty PostgreSQL database and reports equal counts and balances", async () => {
    const { code, output } = await cli("migrate", "--to", target.url, "--json");
    expect(code).toBe(0);
    const report = JSON.parse(output) as { tables: Array<{ table: string; sqlite: number; postgres: number }>; organizations: number };
    const counts = Object.fromEntries(report.tables.map((row) => [row.table, row.sqlite]));
    expect(counts).toEqual({
      organizations: 1,
      users: 2,
      invitations: 1,
      sessions: 1,
      api_keys: 2,
      // Each key's spending of the month (the demo's look-ups).
      api_key_monthly_usage: 1, // one counter for the key and its rotation (one line)
      merchants: 6,
      products: 40,
      offers: counts.offers!,
      // The demo's offers never changed: their history is the offers themselves (state_since).
      offer_price_days: 0,
      offer_price_history: 0,
      feed_sources: 0,
      feed_runs: 0,
      feed_tokens: 0,
      feed_source_files: 0,
      credit_buckets: 3,
      credit_transactions: 7,
      reservations: 0,
      idempotency_records: 1,
      orders: 1,
      subscriptions: 1,
      invoices: 1,
      payments: 1,
      payment_reversals: 1,
      provider_events: 1,
      usage_counters: 2, // the one billed look-up: its hour's row and its day's row
      // The outbox moves with the data: the grants, keys and invoice each wrote their event (no endpoint, so no delivery).
      webhook_endpoints: 0,
      webhook_events: 6,
      webhook_deliveries: 0,
      price_watches: 1,
      watch_changes: 1,
    });
    expect(counts.offers).toBeGreaterThan(0);
    expect(report.tables.every((row) => row.sqlite === row.postgres)).toBe(true);
    expect(report.organizations).toBe(1);

    const source = SQLiteStore.open(sqliteUrl);
    const copy = await openStore(target.url);
    try {
      const now = Date.now();
      expect(copy.dialect).toBe("postgres");
      expect(await copy.getBalance(seed.organizationId, now)).toEqual(await source.getBalance(seed.organizationId, now));
      expect(await copy.listTransactions(seed.organizationId, { limit: 100 })).toEqual(await source.listTransactions(seed.organizationId, { limit: 100 }));
      expect(await copy.listApiKeys(seed.organizationId, { limit: 10 })).toEqual(await source.listApiKeys(seed.organizationId, { limit: 10 }));
      expect(await copy.findProductWithOffers(seed.freshGTIN.padStart(14, "0"))).toEqual(await source.findProductWithOffers(seed.freshGTIN.padStart(14, "0")));
      expect(await copy.findKeyCredential(hashSecret(rotatedClearKey))).toMatchObject({ status: "ACTIVE" });
      expect(await copy.findKeyCredential(hashSecret(seed.clearKey))).toMatchObject({ status: "ROTATED" });
      expect(await copy.listOrders({ limit: 10 })).toEqual(await source.listOrders({ limit: 10 }));
      expect(await copy.listSubscriptions(seed.organizationId)).toEqual(await source.listSubscriptions(seed.organizationId));
      expect(await copy.listWatches(seed.organizationId, { limit: 10 })).toEqual(await source.listWatches(seed.organizationId, { limit: 10 }));
      expect(await copy.listInvoices(seed.organizationId, { limit: 10 })).toEqual(await source.listInvoices(seed.organizationId, { limit: 10 }));
      expect(await copy.findSessionWithUser("ses_copy")).toEqual(await source.findSessionWithUser("ses_copy"));
      expect(await copy.hasPayment("chk_copy")).toBe(true);
      expect(await copy.recordProviderEvent({ id: "evt_copy", type: "checkout.session.completed" }, now)).toBe(false);
      const claim = { scope: "copy", keyHash: "key-hash", requestHash: "request-hash", now, ttlMs: 86_400_000, abandonAfterMs: 60_000 };
      expect(await copy.claimIdempotencyKey(claim)).toEqual(await source.claimIdempotencyKey(claim));
    } finally {
      await source.close();
      await copy.close();
    }
  });

  test("refuses a target that already has data, prints why on one line and changes nothing", async () => {
    const result = Bun.spawnSync([process.execPath, "src/main.ts", "migrate", "--to", target.url], { env: { ...process.env, DATABASE_URL: sqliteUrl } });
    expect(result.exitCode).toBe(1);
    const stderr = result.stderr.toString();
    expect(stderr.trim().split("\n")).toHaveLength(1);
    expect(stderr).toContain("not empty");
    const copy = await openStore(target.url);
    try {
      expect(await copy.countProducts()).toBe(40);
    } finally {
      await copy.close();
    }
  });

  test("prints a table of row counts per table for people", async () => {
    const fresh = await createTestDatabase();
    try {
      const { code, output } = await cli("migrate", "--to", fresh.url);
      expect(code).toBe(0);
      const lines = output.split("\n");
      expect(lines[0]).toMatch(/^table\s+sqlite\s+postgres$/);
      expect(lines).toContainEqual(expect.stringMatching(/^products\s+40\s+40$/));
      expect(lines[lines.length - 1]).toContain("balances of 1 organization(s) match");
    } finally {
      await fresh.drop();
    }
  });
});
