import type { Order } from "../../db/billing/records";
import { systemClock, toISO } from "../../lib/clock";
import { Problem } from "../../http/problem";
import { bucketJSON } from "../../modules/billing/serialize";
import { completeLocalOrder } from "../../modules/billing/service";
import { type Command, output, UsageError, wholeNumber, parseCommandArgs } from "../command";

export function orderJSON(order: Order) {
  return {
    id: order.id,
    organizationId: order.organizationId,
    kind: order.kind,
    itemId: order.itemId,
    itemName: order.itemName,
    credits: order.credits,
    interval: order.interval,
    amount: { amount: order.amount, currency: order.currency },
    status: order.status,
    provider: order.provider,
    createdAt: toISO(order.createdAt),
    completedAt: toISO(order.completedAt),
  };
}

function line(order: Order): string {
  return `${order.id}\t${order.organizationId}\t${order.kind}\t${order.itemId}\t${order.status}\t${toISO(order.createdAt)}`;
}

export const ordersCommand: Command = {
  name: "orders",
  summary: "List checkouts and complete local ones",
  usage:
    "orders list [--org ORG_ID] [--limit N] [--json]\n  orders complete CHECKOUT_ID [--json]   (grants the credits once; completing again grants nothing more)",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "orders", { org: { type: "string" }, limit: { type: "string", default: "100" } });
    const json = values.json === true;
    const store = await context.store();
    switch (positionals[0]) {
      case "list": {
        const limit = wholeNumber(values.limit!, "limit");
        if (limit > 1000) throw new UsageError("--limit must be at most 1000");
        const page = await store.listOrders({ organizationId: values.org, limit });
        output(context, json, page.items.map(orderJSON), page.items.map(line).join("\n"));
        return;
      }
      case "complete": {
        const id = positionals[1];
        if (id === undefined) throw new UsageError("orders complete needs the checkout id (ord_…)");
        let result: Awaited<ReturnType<typeof completeLocalOrder>>;
        try {
          result = await completeLocalOrder({ store, clock: systemClock }, id);
        } catch (error) {
          // The service speaks HTTP problems; the CLI speaks one line on stderr.
          if (error instanceof Problem) throw new Error(error.detail?.en ?? error.slug);
          throw error;
        }
        const { applied, order, bucket } = result;
        output(
          context,
          json,
          { order: orderJSON(order), granted: applied, bucket: bucket === null ? null : bucketJSON(bucket) },
          applied ? `${order.id} completed: +${order.credits} credits for ${order.organizationId}` : `${order.id} was already completed: nothing granted`,
        );
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use list or complete`);
    }
  },
};
