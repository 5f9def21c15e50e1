import { type FeedRun, type FeedRunStatus, type FeedRunTrigger, type FeedSource, type FinishFeedRun, MAX_REPORTED_REJECTS } from "../../db/feeds/records";
import type { Store } from "../../db/store";
import { sourceWriter } from "../../db/feeds/writers";
import type { Clock } from "../../lib/clock";
import { newId } from "../../lib/ids";
import { type FeedFormat, importFeed, type ImportReport } from "../ingest/import-feed";

/** What a run knows before it starts reading records. */
export interface RunContext {
  source: FeedSource;
  trigger: FeedRunTrigger;
  startedAt: number;
  file?: string | null;
  httpStatus?: number | null;
  attempts?: number;
}

/** Thrown by a body stream that went past the operator's size limit, so the run can say so. */
export class FeedTooLargeError extends Error {
  constructor(readonly limitBytes: number) {
    super(`the body is larger than the limit of ${limitBytes} bytes`);
  }
}

/**
 * Imports one feed body into the store for a source, with the rules of `price-service import` (a
 * bad line is reported and skipped, good lines are written in batches), and returns the run's
 * report. A failure while reading (a cut connection, a time-out, the size limit) ends the run as
 * failed; the batches written before it stay written, and the report says how far it got.
 */
export async function importForSource(
  store: Store,
  clock: Clock,
  context: RunContext,
  input: { stream: ReadableStream<Uint8Array>; format: FeedFormat; onProgress?: (report: Readonly<ImportReport>, bytesRead: number) => void },
): Promise<{ report: ImportReport; error: unknown }> {
  let report: ImportReport = { read: 0, products: 0, offers: 0, rejected: [], rejectedCount: 0 };
  try {
    report = await importFeed(store, input.stream, {
      format: input.format,
      now: clock.now(),
      writer: sourceWriter(context.source),
      maxRejected: MAX_REPORTED_REJECTS,
      onProgress: (sofar, bytesRead) => {
        report = { ...sofar, rejected: sofar.rejected };
        input.onProgress?.(sofar, bytesRead);
      },
    });
    return { report, error: null };
  } catch (error) {
    return { report, error };
  }
}

/** The run record of a finished attempt. */
export function runRecord(clock: Clock, context: RunContext, outcome: { status: FeedRunStatus; report?: ImportReport; error?: string | null }): FeedRun {
  const report = outcome.report;
  return {
    id: newId("run", context.startedAt),
    sourceId: context.source.id,
    trigger: context.trigger,
    status: outcome.status,
    startedAt: context.startedAt,
    durationMs: Math.max(0, clock.now() - context.startedAt),
    file: context.file ?? null,
    httpStatus: context.httpStatus ?? null,
    attempts: context.attempts ?? 1,
    recordsRead: report?.read ?? 0,
    products: report?.products ?? 0,
    offers: report?.offers ?? 0,
    rejectedCount: report?.rejectedCount ?? 0,
    rejected: report?.rejected ?? [],
    error: outcome.error ?? null,
  };
}

/** Stores a run and releases the lease it held; returns the run. */
export async function finishRun(store: Store, finish: FinishFeedRun): Promise<FeedRun> {
  await store.finishFeedRun(finish);
  return finish.run;
}

/** A one-line reason for a run's error, never a stack. */
export function describeError(error: unknown): string {
  if (error instanceof FeedTooLargeError) return error.message;
  if (error instanceof Error) {
    if (error.name === "TimeoutError" || error.name === "AbortError") return error.message;
    return error.message.split("\n")[0]!;
  }
  return String(error);
}

/**
 * Passes a body through while counting its bytes, and fails it with FeedTooLargeError past `limit`.
 * A body that starts with gzip's magic bytes (1f 8b) is decompressed first, whatever its name or
 * headers say (a `.gz` object served with `Content-Encoding: gzip` arrives already decompressed), so
 * the limit is on what is parsed and a small gzip bomb cannot get past it.
 */
export function limitedBody(body: ReadableStream<Uint8Array>, options: { limitBytes: number }): ReadableStream<Uint8Array> {
  const source = body.getReader();
  let inner: ReadableStreamDefaultReader<Uint8Array> | null = null;
  let size = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (inner === null) {
        let head: Uint8Array = new Uint8Array(0);
        while (head.length < 2) {
          const { done, value } = await source.read();
          if (done) break;
          head = concatBytes(head, value);
        }
        const whole = replayed(head, source);
        inner = (
          head[0] === 0x1f && head[1] === 0x8b
            ? whole.pipeThrough(new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>)
            : whole
        ).getReader();
      }
      const { done, value } = await inner.read();
      if (done) return controller.close();
      size += value.byteLength;
      if (size <= options.limitBytes) return controller.enqueue(value);
      controller.error(new FeedTooLargeError(options.limitBytes));
      await inner.cancel().catch(() => undefined);
    },
    cancel(reason) {
      return (inner ?? source).cancel(reason);
    },
  });
}

function concatBytes(a: Uint8Array, b: Uint8Array): Uint8Array {
  const joined = new Uint8Array(a.length + b.length);
  joined.set(a);
  joined.set(b, a.length);
  return joined;
}

/** `head`, then the rest of `reader`. */
function replayed(head: Uint8Array, reader: ReadableStreamDefaultReader<Uint8Array>): ReadableStream<Uint8Array> {
  let headSent = head.length === 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (!headSent) {
        headSent = true;
        return controller.enqueue(head);
      }
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/** Whether a failed read would fail the same way next time (too large, not gzip after all, unparsable), rather than a passing I/O error. */
export function isPermanentReadError(error: unknown): boolean {
  return !(error instanceof Error && typeof (error as NodeJS.ErrnoException).code === "string" && /^E[A-Z]+$/.test((error as NodeJS.ErrnoException).code!));
}

/** The format a name implies (`.csv`, `.csv.gz` → csv), else the source's declared one, else NDJSON. */
export function formatOf(source: FeedSource, name: string, contentType?: string | null): FeedFormat {
  if (source.format !== null) return source.format;
  if (contentType !== undefined && contentType !== null && /^text\/csv\b/i.test(contentType)) return "csv";
  return /\.csv(\.gz)?$/i.test(name) ? "csv" : "ndjson";
}
