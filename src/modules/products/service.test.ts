// The look-up's outcomes when the store's debit or release fails in ways only some stores produce
// (PostgreSQL: credits spent by another instance, a debit in doubt), driven by a scripted store.
import { describe, expect, test } from "bun:test";
import { CreditsSpentMeanwhile, DebitInDoubt, type KeyCredential, type Store } from "../../db/store";
import { FakeClock } from "../../lib/clock";
import { InFlightWork } from "../../lib/in-flight";
import { lookUpPrices } from "./service";

const FRESH = "04006381333931";
const MINUTE = 60_000;

interface Script {
  /** Whether the reservation is refused (with 2 credits available). */
  refused?: boolean;
  commit?: () => Promise<boolean>;
  /** Release attempts that fail before one succeeds. */
  failedReleases?: number;
  available?: () => Promise<number>;
  found?: boolean;
}

/** The store calls of a look-up, answering as `script` says, and what the look-up asked of them. */
function scriptedStore(clock: FakeClock, script: Script) {
  const calls = { reserve: 0, release: 0, released: false };
  let failedReleases = script.failedReleases ?? 0;
  const product = { product: { gtin: FRESH, title: "Product", brand: null, imageUrl: null }, offers: [offer(clock.now())] };
  const store = {
    availableCredits: script.available ?? (async () => 7),
    async reserveCredits(input: { amount: number }) {
      calls.reserve++;
      if (script.refused) return { ok: false as const, available: 2 };
      return { ok: true as const, reservationId: "res_1", available: 10 - input.amount };
    },
    findProductWithOffers: async () => (script.found === false ? null : product),
    findProductsWithOffers: async (gtins: string[]) => gtins.map(() => (script.found === false ? null : product)),
    async releaseReservation() {
      calls.release++;
      if (failedReleases-- > 0) throw new Error("the release's write failed");
      calls.released = true;
      return true;
    },
    shrinkReservation: async () => true,
    commitReservation: script.commit ?? (async () => true),
  };
  return { store: store as unknown as Store, calls };
}

function offer(observedAt: number) {
  return {
    merchantId: "m-a",
    merchantName: "Merchant A",
    priceAmount: 999,
    currency: "EUR",
    shippingAmount: null,
    availability: "in_stock" as const,
    condition: "new" as const,
    url: null,
    observedAt,
  };
}

const credential = { id: "key_1", lineId: "key_1", organizationId: "org_1", keyPrefix: "pps_", keyHash: "h", status: "ACTIVE" } as KeyCredential;

function lookUp(script: Script, gtins: string[] = [FRESH]) {
  const clock = new FakeClock();
  const { store, calls } = scriptedStore(clock, script);
  const deps = { store, lookups: new InFlightWork(), clock, creditCost: 1, freshnessWindowMs: 10 * MINUTE };
  const result = lookUpPrices(deps, { credential, gtins, language: "en", requestId: "req_1" });
  return { result, calls };
}

async function until(condition: () => boolean, withinMs: number): Promise<boolean> {
  const deadline = performance.now() + withinMs;
  while (!condition() && performance.now() < deadline) await Bun.sleep(10);
  return condition();
}

describe("a look-up whose debit does not happen as planned", () => {
  test("credits spent meanwhile by another instance: 402 with what is left, nothing billed and nothing left to give back", async () => {
    const { result, calls } = lookUp({ commit: () => Promise.reject(new CreditsSpentMeanwhile(3)) });
    expect(await result).toEqual({ status: 402, items: [], creditsConsumed: 0, creditsRemaining: 3 });
    expect(calls.release).toBe(0);
  });

  test("a debit in doubt: 503 marked in doubt, without data, and the hold given back", async () => {
    const { result, calls } = lookUp({ commit: () => Promise.reject(new DebitInDoubt(new Error("connection lost"))) });
    expect(await result).toEqual({ status: 503, items: [], creditsConsumed: 0, creditsRemaining: 7, debitInDoubt: true });
    expect(calls.released).toBe(true);
  });

  test("a failed debit: 503 not in doubt, without data, and the hold given back", async () => {
    const { result, calls } = lookUp({ commit: () => Promise.reject(new Error("write failed")) });
    expect(await result).toEqual({ status: 503, items: [], creditsConsumed: 0, creditsRemaining: 7 });
    expect(calls.released).toBe(true);
  });

  test("a failed debit when the balance cannot be read either answers 0 credits remaining", async () => {
    const { result } = lookUp({ commit: () => Promise.reject(new Error("write failed")), available: () => Promise.reject(new Error("read failed")) });
    expect(await result).toEqual({ status: 503, items: [], creditsConsumed: 0, creditsRemaining: 0 });
  });

  test("a release that fails is tried again, with a growing pause, until the credits are back", async () => {
    const { result, calls } = lookUp({ commit: () => Promise.reject(new Error("write failed")), failedReleases: 2 });
    expect((await result).status).toBe(503);
    expect(calls.released).toBe(false);
    // Tried again after 100 ms, then after 200 ms.
    expect(await until(() => calls.released, 2_000)).toBe(true);
    expect(calls.release).toBe(3);
  });
});

describe("a look-up with nothing to bill", () => {
  test("a reservation refused: 402 with the credits available, no items, nothing looked up", async () => {
    const { result, calls } = lookUp({ refused: true });
    expect(await result).toEqual({ status: 402, items: [], creditsConsumed: 0, creditsRemaining: 2, keyLimit: undefined });
    expect(calls.release).toBe(0);
  });

  test("no well-formed GTIN: nothing reserved, no items, the balance", async () => {
    const { result, calls } = lookUp({}, []);
    expect(await result).toEqual({ status: 200, items: [], creditsConsumed: 0, creditsRemaining: 7 });
    expect(calls.reserve).toBe(0);
  });

  test("no fresh product: released once; a balance that cannot be read afterwards fails the look-up without a second release", async () => {
    const { result, calls } = lookUp({ found: false, available: () => Promise.reject(new Error("read failed")) });
    await expect(result).rejects.toThrow("read failed");
    expect(calls.release).toBe(1);
  });
});
