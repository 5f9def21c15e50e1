import type { Balance, Bucket, LedgerTransaction } from "../../db/store";
import { toISO } from "../../lib/clock";

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

export function transactionJSON(transaction: LedgerTransaction) {
  return {
    id: transaction.id,
    type: transaction.type,
    amount: transaction.amount,
    balanceAfter: transaction.balanceAfter,
    bucketId: transaction.bucketId,
    keyId: transaction.keyId,
    requestId: transaction.requestId,
    gtin: transaction.gtin,
    description: transaction.description,
    createdAt: toISO(transaction.createdAt),
  };
}
