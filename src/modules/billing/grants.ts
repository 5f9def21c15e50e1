import type { CreditGrant, InvoiceInput, Order, PlanInterval } from "../../db/billing/records";
import { addIntervals } from "./periods";

const DAY_MS = 86_400_000;

function formatCredits(credits: number): string {
  return credits.toLocaleString("en-US");
}

/** The bucket a paid pack becomes: spendable for `validityDays`, or forever. */
export function packGrant(order: Pick<Order, "itemName" | "credits" | "validityDays">, now: number): CreditGrant {
  return {
    source: "pack",
    type: "purchase",
    amount: order.credits,
    expiresAt: order.validityDays === null ? null : now + order.validityDays * DAY_MS,
    description: `Pack "${order.itemName}": ${formatCredits(order.credits)} credits`,
  };
}

/** The bucket of one subscription period: its credits expire when the period ends. */
export function periodGrant(plan: { name: string; credits: number }, periodEnd: number): CreditGrant {
  return {
    source: "subscription",
    type: "subscription",
    amount: plan.credits,
    expiresAt: periodEnd,
    description: `Subscription "${plan.name}": ${formatCredits(plan.credits)} credits until ${new Date(periodEnd).toISOString().slice(0, 10)}`,
  };
}

export function orderInvoice(
  order: Pick<Order, "kind" | "itemName" | "credits" | "interval" | "amount" | "currency">,
  period: { start: number; end: number } | null,
): InvoiceInput {
  const what = order.kind === "pack" ? `${formatCredits(order.credits)} credits` : `${formatCredits(order.credits)} credits per ${order.interval}`;
  return {
    description: `${order.itemName} (${what})`,
    amount: order.amount,
    currency: order.currency,
    periodStart: period?.start ?? null,
    periodEnd: period?.end ?? null,
  };
}

export function firstPeriodEnd(now: number, interval: PlanInterval): number {
  return addIntervals(now, interval, 1);
}
