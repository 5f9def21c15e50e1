import type { Language } from "../../http/i18n";
import { ledgerText } from "./ledger-text";
import type { Balance, Bucket, LedgerTransaction } from "../../db/store";
import { toISO } from "../../lib/clock";
import type { Catalog } from "./catalog";

export function bucketJSON(bucket: Bucket) {
  return {
    id: bucket.id,
    source: bucket.source,
    granted: bucket.granted,
    remaining: bucket.remaining,
    expiresAt: toISO(bucket.expiresAt),
    createdAt: toISO(bucket.createdAt),
  };
}

export function balanceJSON(balance: Balance) {
  return { available: balance.available, reserved: balance.reserved, buckets: balance.buckets.map(bucketJSON) };
}

/** A ledger row as the API shows it, its description in `language`. */
export function transactionJSON(transaction: LedgerTransaction, language: Language, catalog: Catalog) {
  return {
    id: transaction.id,
    type: transaction.type,
    amount: transaction.amount,
    balanceAfter: transaction.balanceAfter,
    bucketId: transaction.bucketId,
    keyId: transaction.keyId,
    requestId: transaction.requestId,
    gtin: transaction.gtin,
    description: ledgerText(transaction.description, language, catalog),
    createdAt: toISO(transaction.createdAt),
  };
}
