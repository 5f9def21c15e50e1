import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import type { FeedRun, FeedRunTrigger, FeedSource } from "../../db/feeds/records";
import type { Store } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { type OutboundClient, OutboundRefusal } from "../../lib/outbound";
import type { ImportReport } from "../ingest/import-feed";
import { describeError, finishRun, formatOf, importForSource, isPermanentReadError, limitedBody, type RunContext, runRecord } from "./run";

/** Redirects a pull follows, each hop checked by the outbound policy like the first. */
export const FEED_MAX_REDIRECTS = 5;

export interface PullOptions {
  /** Every pull goes out through it (the outbound address policy). */
  outbound: OutboundClient;
  sleep: (ms: number) => Promise<void>;
  /** First back-off pause; each retry waits twice as long as the one before (with ±20 % jitter). */
  retryBaseMs: number;
  /** Largest body a pull reads, after gzip decompression. */
  bodyLimitBytes: number;
  userAgent: string;
  /** Called as a run's records are written, with what it reads (the URL or the file's name): `feeds run`'s progress line. */
  onProgress?: (reading: string, report: Readonly<ImportReport>, bytesRead: number) => void;
}

/** Statuses worth asking again: the server or something in front of it is overloaded or down for a moment. */
function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

function backoffMs(options: PullOptions, attempt: number): number {
  const base = options.retryBaseMs * 2 ** (attempt - 1);
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

/**
 * One pull of a URL source, through the outbound policy (redirects followed, each hop checked): a conditional GET (If-None-Match / If-Modified-Since from the last 200
 * answer) with gzip accepted, a time-out per attempt covering the answer and its body, and retries
 * with exponential back-off on network errors, time-outs, 408, 429 and 5xx — only before any record
 * was written, so a retry never imports half a body twice. 304 is a successful run that writes
 * nothing. The run is stored and the lease (if `leaseOwner`) released.
 */
export async function pullURLSource(
  store: Store,
  clock: Clock,
  source: FeedSource,
  input: { trigger: FeedRunTrigger; leaseOwner: string | null },
  options: PullOptions,
): Promise<FeedRun> {
  const url = source.location!;
  const context: RunContext = { source, trigger: input.trigger, startedAt: clock.now(), file: null, attempts: 0 };
  const headers: Record<string, string> = {
    "accept-encoding": "gzip",
    accept: "application/x-ndjson, application/jsonl;q=0.9, text/csv;q=0.9, */*;q=0.1",
    "user-agent": options.userAgent,
  };
  if (source.etag !== null) headers["if-none-match"] = source.etag;
  if (source.lastModified !== null) headers["if-modified-since"] = source.lastModified;
  const finish = (run: FeedRun, validators?: { etag: string | null; lastModified: string | null }) =>
    finishRun(store, { run, leaseOwner: input.leaseOwner, validators });

  let lastError = "";
  for (let attempt = 1; attempt <= source.retries + 1; attempt++) {
    context.attempts = attempt;
    if (attempt > 1) await options.sleep(backoffMs(options, attempt - 1));
    const signal = AbortSignal.timeout(source.timeoutMs);
    let response: Response;
    try {
      response = await options.outbound.send(url, { headers, signal, maxRedirects: FEED_MAX_REDIRECTS });
    } catch (error) {
      // A refused address stays refused: no retry.
      if (error instanceof OutboundRefusal) return finish(runRecord(clock, context, { status: "failed", error: `request refused: ${error.message}` }));
      lastError = signal.aborted ? `timed out after ${source.timeoutMs} ms` : `request failed: ${describeError(error)}`;
      continue;
    }
    context.httpStatus = response.status;
    if (response.status === 304) {
      await response.body?.cancel().catch(() => undefined);
      return finish(runRecord(clock, context, { status: "not-modified" }));
    }
    if (!response.ok) {
      await response.body?.cancel().catch(() => undefined);
      lastError = `HTTP ${response.status}`;
      if (isRetryableStatus(response.status)) continue;
      return finish(runRecord(clock, context, { status: "failed", error: lastError }));
    }
    const contentType = response.headers.get("content-type");
    const body = limitedBody(response.body ?? new Blob([]).stream(), { limitBytes: options.bodyLimitBytes });
    const format = formatOf(source, new URL(url).pathname, contentType);
    const onProgress =
      options.onProgress === undefined ? undefined : (report: Readonly<ImportReport>, bytes: number) => options.onProgress?.(url, report, bytes);
    const { report, error } = await importForSource(store, clock, context, { stream: body, format, onProgress });
    if (error !== null) {
      const reason = signal.aborted ? `timed out after ${source.timeoutMs} ms while reading the body` : `reading the body failed: ${describeError(error)}`;
      return finish(runRecord(clock, context, { status: "failed", report, error: reason }));
    }
    // Validators are kept only from a complete 200, so a failed read is fetched whole next time.
    return finish(runRecord(clock, context, { status: "ok", report }), {
      etag: response.headers.get("etag"),
      lastModified: response.headers.get("last-modified"),
    });
  }
  return finish(runRecord(clock, context, { status: "failed", error: `${lastError} (${context.attempts} attempts)` }));
}

/** Names a writer is still filling (write to such a name, then rename) and hidden files are left alone. */
function isCandidateFile(name: string): boolean {
  return !name.startsWith(".") && !/\.(tmp|part|partial|swp)$/i.test(name);
}

/**
 * One scan of a directory source: every regular file not imported before (by name, size and
 * modification time) is imported as a run of its own, oldest first. A scan that finds nothing new
 * stores no run; an unreadable directory stores a failed one. Before each file the scan renews its
 * lease (`leaseMs` more), and stops if another instance has taken the source meanwhile, so a long
 * scan never runs beside the next period's. A file that cannot be read for a passing reason (gone,
 * not readable yet) is tried again at the next scan; one that fails the same way every time (too
 * large, a broken gzip) is recorded as imported with its failed run, so it is not retried forever.
 */
export async function scanDirectorySource(
  store: Store,
  clock: Clock,
  source: FeedSource,
  input: { trigger: FeedRunTrigger; leaseOwner: string | null; leaseMs?: number },
  options: Pick<PullOptions, "bodyLimitBytes" | "onProgress">,
): Promise<FeedRun[]> {
  const directory = source.location!;
  const startedAt = clock.now();
  let files: Array<{ name: string; size: number; modifiedAt: number }>;
  try {
    const entries = await readdir(directory, { withFileTypes: true });
    files = [];
    for (const entry of entries) {
      if (!entry.isFile() || !isCandidateFile(entry.name)) continue;
      const info = await stat(join(directory, entry.name)).catch(() => null);
      if (info !== null) files.push({ name: entry.name, size: info.size, modifiedAt: Math.trunc(info.mtimeMs) });
    }
  } catch (error) {
    const run = runRecord(
      clock,
      { source, trigger: input.trigger, startedAt },
      { status: "failed", error: `cannot read the directory: ${describeError(error)}` },
    );
    return [await finishRun(store, { run, leaseOwner: input.leaseOwner })];
  }
  files.sort((a, b) => a.modifiedAt - b.modifiedAt || (a.name < b.name ? -1 : 1));
  const runs: FeedRun[] = [];
  const fresh = [];
  for (const file of files) if (!(await store.hasImportedFeedFile(source.id, file))) fresh.push(file);
  for (const [index, file] of fresh.entries()) {
    if (
      input.leaseOwner !== null &&
      index > 0 &&
      !(await store.renewFeedLease({ id: source.id, owner: input.leaseOwner, now: clock.now(), leaseMs: input.leaseMs ?? 0 }))
    )
      break;
    const context: RunContext = { source, trigger: input.trigger, startedAt: clock.now(), file: file.name };
    // Only the last run of the scan releases the lease: the scan holds it until its last file is in.
    const leaseOwner = index === fresh.length - 1 ? input.leaseOwner : null;
    let outcome: { report?: ImportReport; error: unknown };
    try {
      const body = limitedBody(Bun.file(join(directory, file.name)).stream(), { limitBytes: options.bodyLimitBytes });
      const onProgress =
        options.onProgress === undefined ? undefined : (report: Readonly<ImportReport>, bytes: number) => options.onProgress?.(file.name, report, bytes);
      outcome = await importForSource(store, clock, context, { stream: body, format: formatOf(source, file.name), onProgress });
    } catch (error) {
      outcome = { error };
    }
    const { report, error } = outcome;
    const run =
      error === null
        ? runRecord(clock, context, { status: "ok", report })
        : runRecord(clock, context, { status: "failed", report, error: `reading ${file.name} failed: ${describeError(error)}` });
    runs.push(await finishRun(store, { run, leaseOwner, importedFile: error === null || isPermanentReadError(error) ? file : undefined }));
  }
  if (input.leaseOwner !== null && (fresh.length === 0 || runs.length < fresh.length)) await store.releaseFeedLease(source.id, input.leaseOwner);
  return runs;
}
