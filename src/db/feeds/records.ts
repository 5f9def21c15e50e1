// What the store keeps about feeds: the sources the operator declared, each run's
// report, the tokens that authenticate pushes and the operator read endpoints, and price history.

export type FeedSourceKind = "url" | "directory" | "push";
export type FeedFormatName = "ndjson" | "csv";
export type FeedRunTrigger = "schedule" | "push" | "manual";
export type FeedRunStatus = "ok" | "not-modified" | "failed";

export interface FeedSource {
  id: string;
  name: string;
  kind: FeedSourceKind;
  /** The URL or the directory; null for push sources. */
  location: string | null;
  format: FeedFormatName | null;
  intervalMs: number | null;
  timeoutMs: number;
  retries: number;
  etag: string | null;
  lastModified: string | null;
  nextRunAt: number | null;
  leaseOwner: string | null;
  leaseUntil: number | null;
  lastRunAt: number | null;
  lastSuccessAt: number | null;
  createdAt: number;
  removedAt: number | null;
  /** The merchants whose offers and names the source may write (writers.ts). */
  merchants: string[];
  /** Whether its titles, brands and images replace those another source gave first. */
  authoritative: boolean;
}

export type NewFeedSource = Pick<
  FeedSource,
  "id" | "name" | "kind" | "location" | "format" | "intervalMs" | "timeoutMs" | "retries" | "createdAt" | "merchants" | "authoritative"
>;

/** What the operator may change of a source's trust: its merchants, its precedence. */
export type FeedSourceTrust = Partial<Pick<FeedSource, "merchants" | "authoritative">>;

export interface FeedRejectedLine {
  line: number;
  error: string;
}

export interface FeedRun {
  id: string;
  sourceId: string;
  trigger: FeedRunTrigger;
  status: FeedRunStatus;
  startedAt: number;
  durationMs: number;
  file: string | null;
  httpStatus: number | null;
  attempts: number;
  recordsRead: number;
  products: number;
  offers: number;
  rejectedCount: number;
  /** The first MAX_REPORTED_REJECTS rejected lines; rejectedCount has them all. */
  rejected: FeedRejectedLine[];
  error: string | null;
}

/** How many rejected lines a run keeps (the count is exact): a feed of garbage must not bloat the table. */
export const MAX_REPORTED_REJECTS = 1000;

/** What ends a run: its report, and for pulls the validators to send next time and the file imported. */
export interface FinishFeedRun {
  run: FeedRun;
  /** The claim this run held (released when it finishes); null for pushes and operator runs without one. */
  leaseOwner: string | null;
  /** The ETag / Last-Modified of a 200 answer, stored for the next conditional request. */
  validators?: { etag: string | null; lastModified: string | null };
  importedFile?: { name: string; size: number; modifiedAt: number };
}

export type FeedTokenScope = "push" | "read";

export interface FeedTokenRecord {
  id: string;
  sourceId: string | null;
  scope: FeedTokenScope;
  name: string;
  createdAt: number;
  revokedAt: number | null;
  lastUsedAt: number | null;
}

export interface NewFeedToken extends Omit<FeedTokenRecord, "revokedAt" | "lastUsedAt"> {
  secretHash: string;
}

export interface FeedTokenCredential {
  id: string;
  sourceId: string | null;
  scope: FeedTokenScope;
  secretHash: string;
  revokedAt: number | null;
}

/** Per source: offers it last wrote and how many of them are observed at or after the freshness cutoff. */
export interface SourceFreshness {
  sourceId: string;
  offers: number;
  freshOffers: number;
}

export interface PriceHistoryEntry {
  gtin: string;
  merchantId: string;
  priceAmount: number;
  currency: string;
  shippingAmount: number | null;
  availability: string;
  observedAt: number;
  sourceId: string | null;
}
