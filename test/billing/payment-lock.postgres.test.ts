import { afterEach, expect, test } from "bun:test";
import { ledgerSum, queryRows, type TwoStores, twoStoresOnOneDatabase } from "../support/context";

// A payment's grant and its reversal take turns on the payment's lock (lockPayment): whichever
// commits second sees the other. Here the grant's commit is held open for a second (a deferred
// trigger on its payment row) while the other instance hears of a refund of the same payment.
let stores: TwoStores;

afterEach(() => stores.close());

test("a refund heard while another instance commits the grant of its payment waits for it, then takes the credits back", async () => {
  stores = await twoStoresOnOneDatabase();
  const { one, two, clock, organizationId } = stores;
  await queryRows(one, "CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(1); RETURN NULL; END $$");
  await queryRows(
    one,
    "CREATE CONSTRAINT TRIGGER payments_slow_commit AFTER INSERT ON payments DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()",
  );
  const granting = one.applyPaidGrant({
    event: { id: "evt_paid", type: "invoice.paid" },
    organizationId,
    grant: { source: "pack", type: "purchase", amount: 1000, expiresAt: null, description: "1 000 credits" },
    payment: { ref: "pi_1", amount: 900, currency: "EUR" },
    now: clock.now(),
  });
  await Bun.sleep(300);
  const refunded = await two.refundPayment({
    event: { id: "evt_refund", type: "charge.refunded" },
    ref: "pi_1",
    refundedAmount: 900,
    description: "Refund",
    now: clock.now(),
  });
  expect((await granting).applied).toBe(true);
  expect(refunded).toMatchObject({ applied: true, clawedBack: 1000, organizationId });
  expect((await one.getBalance(organizationId, clock.now())).available).toBe(0);
  expect(await ledgerSum(two, organizationId)).toBe(0);
});
