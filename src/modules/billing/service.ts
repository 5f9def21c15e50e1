import type { NewOrder, Order } from "../../db/billing/records";
import { decodeLedgerCursor } from "../../db/cursor";
import type { Bucket, Store, TransactionQuery, TransactionType } from "../../db/store";
import type { Config } from "../../config";
import type { Clock } from "../../lib/clock";
import { toISO } from "../../lib/clock";
import { newId } from "../../lib/ids";
import { money } from "../../lib/money";
import type { Language } from "../../http/i18n";
import { Problem } from "../../http/problem";
import { type Catalog, itemName } from "./catalog";
import { firstPeriodEnd, orderInvoice, packGrant, periodGrant } from "./grants";
import type { PaymentProvider } from "./providers/provider";
import { balanceJSON, transactionJSON } from "./serialize";

export interface BillingDeps {
  store: Store;
  clock: Clock;
  config: Config;
  catalog: Catalog;
  payments: PaymentProvider;
}

/** What a POST handler answers; kept as a value so an idempotency layer can store and replay it. */
export interface HandlerResult<T> {
  status: number;
  body: T;
}

const INVALID_CURSOR = { en: "cursor is not a nextCursor of this list.", fr: "cursor n'est pas un nextCursor de cette liste." };

export function catalogJSON(deps: Pick<BillingDeps, "catalog" | "config">, language: Language) {
  return {
    creditCost: deps.config.creditCost,
    freshnessWindowSeconds: Math.ceil(deps.config.freshnessWindowMs / 1000),
    packs: deps.catalog.packs.map((pack) => ({
      id: pack.id,
      name: itemName(pack, language),
      credits: pack.credits,
      price: money(pack.price.amount, pack.price.currency, language),
      validityDays: pack.validityDays ?? null,
    })),
    plans: deps.catalog.plans.map((plan) => ({
      id: plan.id,
      name: itemName(plan, language),
      creditsPerPeriod: plan.creditsPerPeriod,
      interval: plan.interval,
      price: money(plan.price.amount, plan.price.currency, language),
    })),
  };
}

export async function getBalance(deps: Pick<BillingDeps, "store" | "clock">, organizationId: string) {
  return balanceJSON(await deps.store.getBalance(organizationId, deps.clock.now()));
}

function instant(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new Problem("invalid-parameter", { detail: { en: `${name} must be an ISO 8601 date-time.`, fr: `${name} doit être une date ISO 8601.` } });
  return ms;
}

type TransactionsFilter = { limit?: number; cursor?: string; type?: TransactionType; from?: string; to?: string };

/** The store query of a transactions request, its parameters checked (a problem names the bad one). */
function transactionQuery(query: TransactionsFilter, limit: number): TransactionQuery {
  if (query.cursor !== undefined && decodeLedgerCursor(query.cursor) === null) throw new Problem("invalid-parameter", { detail: INVALID_CURSOR });
  const from = instant(query.from, "from");
  const to = instant(query.to, "to");
  if (from !== undefined && to !== undefined && from > to) {
    throw new Problem("invalid-parameter", { detail: { en: "from must not be after to.", fr: "from ne doit pas être postérieur à to." } });
  }
  return { limit, after: query.cursor, types: query.type === undefined ? undefined : [query.type], from, to };
}

export async function listTransactions(deps: Pick<BillingDeps, "store" | "catalog">, organizationId: string, query: TransactionsFilter, language: Language) {
  const page = await deps.store.listTransactions(organizationId, transactionQuery(query, query.limit ?? 20));
  return { items: page.items.map((transaction) => transactionJSON(transaction, language, deps.catalog)), nextCursor: page.nextCursor };
}

const CSV_PAGE = 500;
export const TRANSACTION_CSV_COLUMNS = ["id", "type", "amount", "balanceAfter", "bucketId", "keyId", "requestId", "gtin", "description", "createdAt"] as const;

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, quote or line break. Text that a
 * spreadsheet would run as a formula (=, +, -, @, tab, CR first) gets a leading apostrophe.
 */
export function csvField(value: string | number | null): string {
  if (value === null) return "";
  if (typeof value === "number") return String(value);
  const safe = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(safe) ? `"${safe.replaceAll('"', '""')}"` : safe;
}

/**
 * Every transaction the filters select (all pages from `cursor` on, `limit` ignored), newest first
 * like the JSON list, as a CSV stream: a header line, then one line per transaction, read from the
 * store a page at a time while the client reads, so memory stays flat whatever the ledger's size.
 * Parameters are checked before the first byte, so a bad one is still a problem response.
 */
export function streamTransactionsCSV(
  deps: Pick<BillingDeps, "store" | "catalog">,
  organizationId: string,
  query: TransactionsFilter,
  language: Language,
): ReadableStream<Uint8Array> {
  const first = transactionQuery(query, CSV_PAGE);
  const encoder = new TextEncoder();
  let after = first.after;
  let started = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!started) {
        started = true;
        controller.enqueue(encoder.encode(`${TRANSACTION_CSV_COLUMNS.join(",")}\r\n`));
      }
      const page = await deps.store.listTransactions(organizationId, { ...first, after });
      let text = "";
      for (const transaction of page.items) {
        const row = transactionJSON(transaction, language, deps.catalog);
        text += `${TRANSACTION_CSV_COLUMNS.map((column) => csvField(row[column])).join(",")}\r\n`;
      }
      if (text !== "") controller.enqueue(encoder.encode(text));
      if (page.nextCursor === null) controller.close();
      else after = page.nextCursor;
    },
  });
}

export async function listInvoices(
  deps: Pick<BillingDeps, "payments">,
  organizationId: string,
  query: { limit?: number; cursor?: string },
  language: Language,
) {
  const page = await deps.payments.listInvoices(organizationId, { limit: query.limit ?? 20, cursor: query.cursor });
  return {
    items: page.items.map((invoice) => ({
      id: invoice.id,
      number: invoice.number,
      status: invoice.status,
      total: money(invoice.total.amount, invoice.total.currency, language),
      createdAt: toISO(invoice.createdAt),
      hostedUrl: invoice.hostedUrl,
      pdfUrl: invoice.pdfUrl,
    })),
    nextCursor: page.nextCursor,
  };
}

function unknownItem(field: "packId" | "planId", id: string): Problem {
  return new Problem("invalid-body", { detail: { en: `${field} "${id}" is not in the catalog.`, fr: `${field} « ${id} » n'est pas au catalogue.` } });
}

async function organizationName(store: Store, organizationId: string): Promise<string> {
  return (await store.getOrganization(organizationId))?.name ?? organizationId;
}

/** Stores the order after the provider accepted the checkout, so every stored order has a checkout. */
async function startCheckout(
  deps: BillingDeps,
  order: NewOrder,
  urls: { successUrl?: string; cancelUrl?: string },
): Promise<HandlerResult<{ checkoutId: string; checkoutUrl: string }>> {
  const { config, store, payments } = deps;
  const defaultSuccess = payments.name === "local" ? `${config.publicUrl}/billing/checkout/${order.id}` : `${config.publicUrl}/billing/return?checkout=success`;
  const successUrl = urls.successUrl ?? defaultSuccess;
  const cancelUrl = urls.cancelUrl ?? `${config.publicUrl}/billing/return?checkout=canceled`;
  const { checkoutUrl, providerRef } = await payments.startCheckout({
    order,
    organizationName: await organizationName(store, order.organizationId),
    successUrl,
    cancelUrl,
  });
  await store.createOrder({ ...order, providerRef, successUrl, cancelUrl });
  return { status: 201, body: { checkoutId: order.id, checkoutUrl } };
}

type Buyer = { organizationId: string; userId: string | null };

/** A pending order for one catalog item, at the catalog's price now. */
function newOrder(
  deps: BillingDeps,
  buyer: Buyer,
  item: Pick<NewOrder, "kind" | "itemId" | "itemName" | "credits" | "interval" | "validityDays" | "amount" | "currency">,
): NewOrder {
  const now = deps.clock.now();
  return { id: newId("ord", now), ...buyer, ...item, provider: deps.payments.name, providerRef: null, successUrl: null, cancelUrl: null, createdAt: now };
}

export async function startPackCheckout(deps: BillingDeps, buyer: Buyer, body: { packId: string; successUrl?: string; cancelUrl?: string }) {
  const pack = deps.catalog.packs.find((candidate) => candidate.id === body.packId);
  if (pack === undefined) throw unknownItem("packId", body.packId);
  const order = newOrder(deps, buyer, {
    kind: "pack",
    itemId: pack.id,
    itemName: pack.name,
    credits: pack.credits,
    interval: null,
    validityDays: pack.validityDays ?? null,
    amount: pack.price.amount,
    currency: pack.price.currency,
  });
  return startCheckout(deps, order, body);
}

export async function startSubscriptionCheckout(deps: BillingDeps, buyer: Buyer, body: { planId: string; successUrl?: string; cancelUrl?: string }) {
  const plan = deps.catalog.plans.find((candidate) => candidate.id === body.planId);
  if (plan === undefined) throw unknownItem("planId", body.planId);
  const order = newOrder(deps, buyer, {
    kind: "subscription",
    itemId: plan.id,
    itemName: plan.name,
    credits: plan.creditsPerPeriod,
    interval: plan.interval,
    validityDays: null,
    amount: plan.price.amount,
    currency: plan.price.currency,
  });
  return startCheckout(deps, order, body);
}

export async function openPortal(deps: BillingDeps, organizationId: string, body: { returnUrl?: string } | undefined): Promise<HandlerResult<{ url: string }>> {
  const returnUrl = body?.returnUrl ?? `${deps.config.publicUrl}/billing/return`;
  const url = await deps.payments.portalUrl({ organizationId, organizationName: await organizationName(deps.store, organizationId), returnUrl });
  return { status: 200, body: { url } };
}

export interface LocalCompletion {
  /** False when the order was completed before: nothing more was granted. */
  applied: boolean;
  order: Order;
  bucket: Bucket | null;
}

/**
 * Marks a local order paid: grants its credits (a pack, or a subscription's first period) and
 * writes its paid invoice, all at most once. The Pay button and `orders complete` both land here.
 */
export async function completeLocalOrder(deps: { store: Store; clock: Clock }, orderId: string): Promise<LocalCompletion> {
  const order = await deps.store.getOrder(orderId);
  if (order === null) throw new Problem("not-found", { detail: { en: `No order ${orderId}.`, fr: `Aucune commande ${orderId}.` } });
  if (order.provider !== "local") {
    throw new Problem("conflict", {
      detail: { en: "This order is paid through Stripe: its webhooks complete it.", fr: "Cette commande est payée via Stripe : ses webhooks la finalisent." },
    });
  }
  const now = deps.clock.now();
  const periodEnd = order.kind === "subscription" ? firstPeriodEnd(now, order.interval ?? "month") : null;
  const result = await deps.store.completeOrder({
    orderId,
    now,
    event: null,
    grant: periodEnd === null ? packGrant(order, now) : periodGrant({ name: order.itemName, credits: order.credits }, periodEnd),
    payment: { ref: order.id, amount: order.amount, currency: order.currency },
    subscription: periodEnd === null ? null : { periodEnd },
    invoice: orderInvoice(order, periodEnd === null ? null : { start: now, end: periodEnd }),
  });
  return { applied: result.applied, order: result.order ?? order, bucket: result.bucket };
}
