import { type FeedWriter, merchantRefusal, OPERATOR } from "../../db/feeds/writers";
import type { FeedRecord, Store } from "../../db/store";
import { type FeedRecordResult, parseFeedRecord } from "./feed-record";
import { type NumberedRecord, readCSV, readNDJSON } from "./parse";

export type FeedFormat = "ndjson" | "csv";

export interface ImportOptions {
  format: FeedFormat;
  /** The import's clock: bounds `observedAt` and stamps the products written. */
  now: number;
  /** Records per store transaction. */
  batchSize?: number;
  /** Called after each batch is written, with the report so far and the bytes read from the stream (for a progress line). */
  onProgress?: (report: Readonly<ImportReport>, bytesRead: number) => void;
  /** Who writes: a feed source (its merchants, its precedence), or the operator's `import` by default. */
  writer?: FeedWriter;
  /** Rejected lines kept in the report at most (`rejectedCount` counts them all); every one by default. */
  maxRejected?: number;
}

/** What `import --json` prints. `products` counts distinct GTINs among accepted records. */
export interface ImportReport {
  read: number;
  products: number;
  offers: number;
  rejected: Array<{ line: number; error: string }>;
  /** Every rejected line, also those past `maxRejected`. */
  rejectedCount: number;
}

const DEFAULT_BATCH_SIZE = 1000;
/** An import of at least this many records refreshes the planner's statistics when it ends. */
export const STATISTICS_REFRESH_RECORDS = 1000;

/**
 * Streams a feed into the store. Each record is validated on its own: a rejected one is reported
 * with its line and writes nothing, and never keeps its neighbours from being written. Valid
 * records are written in batches, one transaction each, so memory stays flat on large feeds.
 * Store failures are genuine errors and propagate; batches written before them stay written.
 */
export async function importFeed(store: Store, stream: ReadableStream<Uint8Array>, options: ImportOptions): Promise<ImportReport> {
  const batchSize = options.batchSize ?? DEFAULT_BATCH_SIZE;
  const report: ImportReport = { read: 0, products: 0, offers: 0, rejected: [], rejectedCount: 0 };
  const maxRejected = options.maxRejected ?? Number.POSITIVE_INFINITY;
  const writer = options.writer ?? OPERATOR;
  const gtins = new Set<string>();
  const counted = options.onProgress === undefined ? { stream, bytes: () => 0 } : countingBytes(stream);
  let batch: FeedRecord[] = [];
  const writeBatch = async () => {
    await store.applyFeedRecords(batch, options.now, { writer });
    batch = [];
    options.onProgress?.(report, counted.bytes());
  };

  for await (const records of readRecords(counted.stream, options.format)) {
    for (const numbered of records) {
      report.read++;
      const parsed = checkedRecord(numbered, options.now, writer);
      if (!parsed.ok) {
        if (report.rejectedCount++ < maxRejected) report.rejected.push({ line: numbered.line, error: parsed.error });
        continue;
      }
      gtins.add(parsed.record.product.gtin);
      if (parsed.record.offer !== undefined) report.offers++;
      batch.push(parsed.record);
      if (batch.length >= batchSize) await writeBatch();
    }
  }
  if (batch.length > 0) await writeBatch();
  if (report.read - report.rejectedCount >= STATISTICS_REFRESH_RECORDS) await store.refreshCatalogStatistics();

  report.products = gtins.size;
  return report;
}

/** A record parsed and checked against what its writer may write: a merchant it is not bound to is a rejection. */
function checkedRecord(numbered: NumberedRecord, now: number, writer: FeedWriter): FeedRecordResult {
  if (numbered.value === undefined) return { ok: false, error: numbered.error ?? "unreadable record" };
  const parsed = parseFeedRecord(numbered.value, now);
  const refusal = parsed.ok && parsed.record.offer !== undefined ? merchantRefusal(writer, parsed.record.offer.merchantId) : null;
  return refusal === null ? parsed : { ok: false, error: refusal };
}

/** The stream passed through, counting its bytes as they are read. */
function countingBytes(stream: ReadableStream<Uint8Array>): { stream: ReadableStream<Uint8Array>; bytes: () => number } {
  let bytes = 0;
  const counter = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      bytes += chunk.byteLength;
      controller.enqueue(chunk);
    },
  });
  return { stream: stream.pipeThrough(counter), bytes: () => bytes };
}

function readRecords(stream: ReadableStream<Uint8Array>, format: FeedFormat): AsyncIterable<NumberedRecord[]> {
  return format === "csv" ? readCSV(stream) : readNDJSON(stream);
}

/** The feed format a file name implies: `.csv` is CSV, anything else (and `-`, stdin) is NDJSON. */
export function formatFromFileName(name: string): FeedFormat {
  return name.toLowerCase().endsWith(".csv") ? "csv" : "ndjson";
}
