import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { ChangeHandlers } from "../../src/db/change-listener";
import type { PostgresStore } from "../../src/db/postgres-store";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { hashSecret } from "../../src/lib/crypto";
import { createApiKey } from "../../src/modules/keys/service";
import { ledgerSum, listenerLive, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// A PostgreSQL instance reads a key once and remembers it while its change listener hears every
// change; every change of a credential, by any instance or a direct write, is notified by a trigger.
// The key statement is counted by wrapping it, so the tests see which requests read the database.
let stores: TwoStores;
let serving: PostgresStore;
let other: PostgresStore;
let keyHash: string;
let keyId: string;
let reads: number;
/** Held reads wait for this before returning their rows (see holdReads). */
let gate: Promise<void> | null;

type Prepared = { execute(values: object): Promise<unknown[]> };

beforeEach(async () => {
  stores = await twoStoresOnOneDatabase();
  serving = stores.one as PostgresStore;
  other = stores.two as PostgresStore;
  const now = Date.now();
  await other.ensureSystemUser(now);
  const created = await createApiKey(other, { organizationId: stores.organizationId, name: "k", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now });
  keyHash = hashSecret(created.clearKey);
  keyId = created.key.id;
  reads = 0;
  gate = null;
  const keys = (serving as unknown as { keys: { credentialByHash: () => Prepared } }).keys;
  const prepared = keys.credentialByHash();
  keys.credentialByHash = () => ({
    execute: async (values) => {
      reads++;
      const rows = await prepared.execute(values);
      if (gate !== null) await gate;
      return rows;
    },
  });
  await rememberedWhenListening();
});

afterEach(() => stores.close());

/** Reads the key until the listener is up and the credential remembered (the first reads start it). */
async function rememberedWhenListening(): Promise<void> {
  for (let attempt = 0; attempt < 200 && !serving.changes.live; attempt++) {
    await serving.findKeyCredential(keyHash);
    await Bun.sleep(10);
  }
  expect(serving.changes.live).toBe(true);
  await serving.findKeyCredential(keyHash);
}

const status = async () => (await serving.findKeyCredential(keyHash))!.status;

describe("a remembered key credential on PostgreSQL", () => {
  test("is read once while the listener hears every change; lastUsedAt flushes change nothing it remembers", async () => {
    const before = reads;
    for (let index = 0; index < 5; index++) expect(await status()).toBe("ACTIVE");
    await other.touchApiKeys(new Map([[keyId, Date.now()]]));
    await serving.changesHeard();
    expect(await status()).toBe("ACTIVE");
    expect(reads).toBe(before);
  });

  test("revoked by another instance: refused once the change is heard, which takes one notification", async () => {
    await other.revokeApiKey(stores.organizationId, keyId, Date.now());
    await serving.changesHeard();
    expect(await status()).toBe("REVOKED");
  });

  test("a direct write to the key's row (not through the store) is heard too", async () => {
    await queryRows(other, "UPDATE api_keys SET status = 'REVOKED' WHERE id = ?", [keyId]);
    await serving.changesHeard();
    expect(await status()).toBe("REVOKED");
  });

  test("while the listener's connection is down every request reads the key: a revocation meanwhile is refused at once", async () => {
    await serving.changes.dropConnection();
    expect(await listenerLive(serving, false, 1_000)).toBe(true);
    await other.revokeApiKey(stores.organizationId, keyId, Date.now());
    const before = reads;
    expect(await status()).toBe("REVOKED");
    expect(reads).toBe(before + 1);
    // It listens again within its reconnection delay, starting with nothing remembered.
    expect(await listenerLive(serving, true, 3_000)).toBe(true);
    expect(await status()).toBe("REVOKED");
  });

  test("a read that overlapped a change is not remembered: the next request reads again", async () => {
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    let letThrough!: () => void;
    gate = new Promise<void>((resolve) => (letThrough = resolve));
    const overlapping = serving.findKeyCredential(keyHash);
    await Bun.sleep(50);
    await other.revokeApiKey(stores.organizationId, keyId, Date.now());
    await serving.changesHeard();
    letThrough();
    gate = null;
    expect((await overlapping)!.status).toBe("ACTIVE");
    const before = reads;
    expect(await status()).toBe("REVOKED");
    expect(reads).toBe(before + 1);
  });

  test("a listener that hears nothing, not even itself, stops being trusted within 3 s: requests read again", async () => {
    (serving.changes as unknown as { heard: () => void }).heard = () => {};
    const before = reads;
    expect(await status()).toBe("ACTIVE");
    expect(reads).toBe(before);
    expect(await listenerLive(serving, false)).toBe(true);
    await other.revokeApiKey(stores.organizationId, keyId, Date.now());
    expect(await status()).toBe("REVOKED");
    expect(reads).toBe(before + 1);
  });

  test("an emptied table (TRUNCATE fires no row trigger) makes it forget everything", async () => {
    const before = reads;
    await queryRows(other, "TRUNCATE catalog_version");
    await serving.changesHeard();
    await status();
    expect(reads).toBe(before + 1);
  });

  test("a key changed through the serving instance itself is refused on its next request, before any notification", async () => {
    await serving.revokeApiKey(stores.organizationId, keyId, Date.now());
    expect(await status()).toBe("REVOKED");
  });
});

describe("a remembered balance on PostgreSQL", () => {
  const grant = (store: PostgresStore, amount: number) =>
    store.grantCredits({
      organizationId: stores.organizationId,
      source: "grant",
      type: "grant",
      amount,
      expiresAt: null,
      description: "grant",
      now: Date.now(),
    });
  const remembered = async () => (await serving.findKeyCredential(keyHash))!.balance;
  /** A billed debit of `amount` through `store`, as a look-up makes it. */
  const debit = async (store: PostgresStore, amount: number) => {
    const reservation = await store.reserveCredits({
      organizationId: stores.organizationId,
      amount,
      keyId,
      requestId: `req_${crypto.randomUUID()}`,
      now: Date.now(),
    });
    if (!reservation.ok) throw new Error("not reserved");
    expect(await store.commitReservation(reservation.reservationId, { gtin: "04006381333931", description: "look-up", now: Date.now() })).toBe(true);
  };

  test("another instance's debit says what the buckets hold after it: the balance follows without a read, for at most a second", async () => {
    await grant(other, 10);
    await serving.changesHeard();
    expect(await remembered()).toBeUndefined();
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    expect((await serving.findKeyCredential(keyHash))!.balance).toEqual({ spendable: 10, capped: false });
    expect(await remembered()).toEqual({ spendable: 10, capped: false, remembered: true });
    await debit(other, 3);
    await serving.changesHeard();
    const before = reads;
    expect(await remembered()).toEqual({ spendable: 7, capped: false, remembered: true });
    expect(reads).toBe(before);
    await Bun.sleep(1_050);
    expect(await remembered()).toBeUndefined();
    expect(await ledgerSum(serving, stores.organizationId)).toBe(7);
  });

  test("a grant by another instance makes it forget the balance: the next request reads it", async () => {
    await grant(other, 1);
    await serving.changesHeard();
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    await serving.findKeyCredential(keyHash);
    expect(await remembered()).toEqual({ spendable: 1, capped: false, remembered: true });
    await grant(other, 4);
    await serving.changesHeard();
    expect(await remembered()).toBeUndefined();
  });

  test("the balance an answer reports (creditsRemaining) is remembered as a read is: the next answers read nothing until a change", async () => {
    await grant(other, 6);
    await serving.changesHeard();
    expect(await remembered()).toBeUndefined();
    const reservations = (serving as unknown as { reservations: { availableStatement: () => Prepared } }).reservations;
    const prepared = reservations.availableStatement();
    let balanceReads = 0;
    reservations.availableStatement = () => ({ execute: (values) => (balanceReads++, prepared.execute(values)) });
    const available = () => serving.availableCredits(stores.organizationId, Date.now());
    expect(await available()).toBe(6);
    expect(balanceReads).toBe(1);
    expect(await remembered()).toEqual({ spendable: 6, capped: false, remembered: true });
    for (let index = 0; index < 3; index++) expect(await available()).toBe(6);
    expect(balanceReads).toBe(1);
    await grant(other, 4);
    await serving.changesHeard();
    expect(await available()).toBe(10);
    expect(balanceReads).toBe(2);
  });

  /** The serving instance hears no change of credits until the returned function is called (then it hears them, in order). */
  const holdCreditNotices = () => {
    const handlers = (serving.changes as unknown as { handlers: ChangeHandlers }).handlers;
    const creditsChanged = handlers.creditsChanged;
    const held: Array<Parameters<ChangeHandlers["creditsChanged"]>> = [];
    handlers.creditsChanged = (...notice) => void held.push(notice);
    return () => {
      handlers.creditsChanged = creditsChanged;
      for (const notice of held) creditsChanged(...notice);
    };
  };
  /** A capped key's reservation of 4 of 10 credits (a row of its own), remembered as 6 available. */
  const cappedReservation = async () => {
    await grant(other, 10);
    await serving.changesHeard();
    const capped = await createApiKey(other, {
      organizationId: stores.organizationId,
      name: "capped",
      createdBy: SYSTEM_USER_ID,
      keyPrefix: "pps_",
      monthlyCreditLimit: 100,
      now: Date.now(),
    });
    const reservation = await serving.reserveCredits({
      organizationId: stores.organizationId,
      amount: 4,
      keyId: capped.key.id,
      requestId: "req_capped",
      now: Date.now(),
    });
    if (!reservation.ok) throw new Error("not reserved");
    await serving.changesHeard();
    expect(await serving.availableCredits(stores.organizationId, Date.now())).toBe(6);
    expect(await remembered()).toEqual({ spendable: 6, capped: false, remembered: true });
    return reservation.reservationId;
  };

  test("a capped key's reservation row given back is counted at once by the next answer, before its notice is heard", async () => {
    const reservationId = await cappedReservation();
    const hearCredits = holdCreditNotices();
    expect(await serving.releaseReservation(reservationId, Date.now())).toBe(true);
    expect(await serving.availableCredits(stores.organizationId, Date.now())).toBe(10);
    hearCredits();
  });

  test("a capped key's reservation row shrunk is counted at once by the next answer, before its notice is heard", async () => {
    const reservationId = await cappedReservation();
    const hearCredits = holdCreditNotices();
    expect(await serving.shrinkReservation(reservationId, 1, Date.now())).toBe(true);
    expect(await serving.availableCredits(stores.organizationId, Date.now())).toBe(9);
    hearCredits();
  });

  test("too few remembered credits are read again before a refusal: credits granted that it has not heard of yet are found", async () => {
    await grant(other, 1);
    await serving.changesHeard();
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    await serving.findKeyCredential(keyHash);
    const stale = await remembered();
    expect(stale).toEqual({ spendable: 1, capped: false, remembered: true });
    // The request was admitted with the balance remembered before the grant, whose notice it has not heard.
    await grant(other, 4);
    const reservation = await serving.reserveCredits({
      organizationId: stores.organizationId,
      amount: 3,
      keyId,
      requestId: "req_after_grant",
      now: Date.now(),
      balance: stale,
    });
    expect(reservation).toMatchObject({ ok: true, available: 2 });
  });

  /** A key read (which brings the balance) held until `change` has been made by the other instance and heard. */
  const readOverlapping = async (change: () => Promise<unknown>) => {
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    let letThrough!: () => void;
    gate = new Promise<void>((resolve) => (letThrough = resolve));
    const overlapping = serving.findKeyCredential(keyHash);
    await Bun.sleep(50);
    await change();
    await serving.changesHeard();
    letThrough();
    gate = null;
    return (await overlapping)!.balance;
  };

  test("a balance read that a grant overlapped is not remembered: the next request reads it", async () => {
    await grant(other, 1);
    await serving.changesHeard();
    expect(await readOverlapping(() => grant(other, 4))).toEqual({ spendable: 1, capped: false });
    expect(await remembered()).toBeUndefined();
  });

  test("a balance read that another instance's debit overlapped remembers the lower of the two: what the debit left", async () => {
    await grant(other, 5);
    await serving.changesHeard();
    expect(await readOverlapping(() => debit(other, 2))).toEqual({ spendable: 5, capped: false });
    expect(await remembered()).toEqual({ spendable: 3, capped: false, remembered: true });
  });

  test("its own debit leaves the balance its batch read under lock", async () => {
    await grant(serving, 5);
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    await serving.findKeyCredential(keyHash);
    await debit(serving, 2);
    expect(await remembered()).toEqual({ spendable: 3, capped: false, remembered: true });
  });

  test("credits another instance spent meanwhile are refused at the debit: a 402, nothing billed", async () => {
    await grant(other, 2);
    await serving.changesHeard();
    (serving as unknown as { keys: { forgetCredentials(): void } }).keys.forgetCredentials();
    await serving.findKeyCredential(keyHash);
    // The serving instance admits on the 2 it remembers while the other spends them, before it hears so.
    const reservation = await serving.reserveCredits({
      organizationId: stores.organizationId,
      amount: 2,
      keyId,
      requestId: "req_late",
      now: Date.now(),
      balance: await remembered(),
    });
    expect(reservation.ok).toBe(true);
    await debit(other, 2);
    if (!reservation.ok) return;
    await expect(serving.commitReservation(reservation.reservationId, { gtin: "04006381333931", description: "late", now: Date.now() })).rejects.toMatchObject({
      available: 0,
    });
    expect(await ledgerSum(serving, stores.organizationId)).toBe(0);
  });
});
