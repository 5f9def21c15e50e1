import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import type { CommandContext } from "../../src/cli/command";
import { UsageError } from "../../src/cli/command";
import { creditsCommand } from "../../src/cli/commands/credits";
import { ordersCommand } from "../../src/cli/commands/orders";
import { json } from "../support/context";
import { BILLING, type BillingFixture, billingFixture, postJSON } from "./fixtures";

let fx: BillingFixture;
beforeEach(async () => {
  fx = await billingFixture();
});
afterEach(async () => {
  await fx.context.close();
});

/** Runs a command against the test store, as `price-service <command> ...args` would. */
async function run(command: typeof ordersCommand, ...args: string[]): Promise<string> {
  const lines: string[] = [];
  const context: CommandContext = { args, config: fx.context.services.config, store: async () => fx.context.store, out: (text) => lines.push(text) };
  await command.run(context);
  return lines.join("\n");
}

async function checkout(kind: "pack" | "subscription", id: string): Promise<string> {
  const response = await postJSON(fx.context, `${BILLING}/checkout/${kind}`, kind === "pack" ? { packId: id } : { planId: id }, fx.session.headers);
  return (await json(response)).checkoutId;
}

describe("price-service orders", () => {
  test("orders list --json lists checkouts newest first, optionally of one organization", async () => {
    const first = await checkout("pack", "pack-1k");
    const second = await checkout("subscription", "basic-monthly");
    const all = JSON.parse(await run(ordersCommand, "list", "--json"));
    expect(all.map((o: { id: string }) => o.id)).toEqual([second, first]);
    expect(all[1]).toEqual({
      id: first,
      organizationId: fx.org.organizationId,
      kind: "pack",
      itemId: "pack-1k",
      itemName: "1,000 credits",
      credits: 1000,
      interval: null,
      amount: { amount: 1000, currency: "EUR" },
      status: "pending",
      provider: "local",
      createdAt: "2026-11-22T10:00:00.000Z",
      completedAt: null,
    });
    expect(JSON.parse(await run(ordersCommand, "list", "--org", "org_nobody", "--json"))).toEqual([]);
    expect(await run(ordersCommand, "list")).toContain(`${first}\t${fx.org.organizationId}\tpack\tpack-1k\tpending`);
  });

  test("orders complete ID --json grants the credits once; completing again grants nothing more", async () => {
    const id = await checkout("pack", "pack-10k");
    const first = JSON.parse(await run(ordersCommand, "complete", id, "--json"));
    expect(first.granted).toBe(true);
    expect(first.order.status).toBe("completed");
    expect(first.bucket).toMatchObject({ source: "pack", granted: 10_000, remaining: 10_000 });
    const again = JSON.parse(await run(ordersCommand, "complete", id, "--json"));
    expect(again).toMatchObject({ granted: false, bucket: null, order: { id, status: "completed" } });
    expect(await run(ordersCommand, "complete", id)).toBe(`${id} was already completed: nothing granted`);
    expect((await fx.context.store.getBalance(fx.org.organizationId, Date.now())).available).toBe(10_000);
    const invoices = await json(await fx.context.request(`${BILLING}/invoices`, { headers: fx.org.auth }));
    expect(invoices.items).toHaveLength(1);
  });

  test("orders complete of a subscription starts it and grants its first period", async () => {
    const id = await checkout("subscription", "basic-monthly");
    const result = JSON.parse(await run(ordersCommand, "complete", id, "--json"));
    expect(result.bucket).toMatchObject({ source: "subscription", granted: 5000 });
    expect(await fx.context.store.listSubscriptions(fx.org.organizationId)).toEqual([expect.objectContaining({ status: "active", orderId: id })]);
  });

  test("an unknown id fails with a one-line message; a missing id or subcommand is a usage error", async () => {
    await expect(run(ordersCommand, "complete", "ord_missing", "--json")).rejects.toThrow("No order ord_missing.");
    await expect(run(ordersCommand, "complete")).rejects.toBeInstanceOf(UsageError);
    await expect(run(ordersCommand, "refund")).rejects.toBeInstanceOf(UsageError);
    await expect(run(ordersCommand, "list", "--limit", "0")).rejects.toBeInstanceOf(UsageError);
  });

  test("a Stripe order cannot be completed by hand: its webhooks complete it", async () => {
    await fx.context.store.createOrder({
      id: "ord_stripe1",
      organizationId: fx.org.organizationId,
      userId: null,
      kind: "pack",
      itemId: "pack-1k",
      itemName: "1,000 credits",
      credits: 1000,
      interval: null,
      validityDays: null,
      amount: 1000,
      currency: "EUR",
      provider: "stripe",
      providerRef: "cs_test_1",
      successUrl: null,
      cancelUrl: null,
      createdAt: fx.context.clock.now(),
    });
    await expect(run(ordersCommand, "complete", "ord_stripe1")).rejects.toThrow("This order is paid through Stripe: its webhooks complete it.");
    expect((await fx.context.store.getOrder("ord_stripe1"))!.status).toBe("pending");
  });
});

describe("price-service credits grant", () => {
  test("--expires-at and --source make a bucket of that source expiring then, with a ledger row of the matching type", async () => {
    const expiresAt = new Date(Date.now() + 7 * 86_400_000).toISOString();
    const bucket = JSON.parse(
      await run(creditsCommand, "grant", "--org", fx.org.organizationId, "--amount", "250", "--expires-at", expiresAt, "--source", "trial", "--json"),
    );
    expect(bucket).toMatchObject({ source: "trial", granted: 250, remaining: 250, expiresAt });
    const ledger = await fx.context.store.listTransactions(fx.org.organizationId, { limit: 5 });
    expect(ledger.items[0]).toMatchObject({ type: "trial", amount: 250, bucketId: bucket.id });
    const pack = JSON.parse(await run(creditsCommand, "grant", "--org", fx.org.organizationId, "--amount", "5", "--source", "pack", "--json"));
    expect(pack.expiresAt).toBeNull();
    expect((await fx.context.store.listTransactions(fx.org.organizationId, { limit: 1 })).items[0]!.type).toBe("purchase");
  });

  test("a past or timezone-less --expires-at and an unknown --source are usage errors", async () => {
    const org = fx.org.organizationId;
    await expect(run(creditsCommand, "grant", "--org", org, "--amount", "5", "--expires-at", "2020-01-01T00:00:00Z")).rejects.toBeInstanceOf(UsageError);
    await expect(run(creditsCommand, "grant", "--org", org, "--amount", "5", "--expires-at", "2099-01-01T00:00:00")).rejects.toBeInstanceOf(UsageError);
    await expect(run(creditsCommand, "grant", "--org", org, "--amount", "5", "--source", "gift")).rejects.toBeInstanceOf(UsageError);
  });

  test("credits balance --json is the balance object of the billing API", async () => {
    await run(creditsCommand, "grant", "--org", fx.org.organizationId, "--amount", "9", "--json");
    const cli = JSON.parse(await run(creditsCommand, "balance", "--org", fx.org.organizationId, "--json"));
    const api = await json(await fx.context.request(`${BILLING}/balance`, { headers: fx.org.auth }));
    expect(cli).toEqual(api);
  });
});
