import { type FeedFormat, formatFromFileName, importFeed, type ImportReport } from "../../modules/ingest/import-feed";
import { type Command, type CommandContext, output, parseCommandArgs, programName, progressLine, UsageError } from "../command";

const FEED_FIELDS = `Feed fields (one NDJSON object per line, or CSV with a header row naming the columns):
  gtin          required; GTIN-8/12/13/14 digits with a valid check digit
  title, brand  optional product text (title at most 500 characters)
  imageUrl      optional http(s) URL of a product image
  merchantId    the merchant's id; without it the line only updates the product
  merchantName  optional merchant name
  price         required with merchantId; major units as a string, e.g. "19.99"
  currency      required with merchantId; ISO 4217 code, e.g. EUR
  shipping      optional shipping cost, same currency
  availability  in_stock | out_of_stock | preorder | unknown (default unknown)
  condition     new | used | refurbished (default new)
  url           optional http(s) URL of the offer
  observedAt    ISO 8601 timestamp with a timezone; when the price was seen; more than 60 s ahead of now
                is rejected, up to 60 s ahead counts as now

Example NDJSON line:
  {"gtin":"4006381333931","merchantId":"shop-1","price":"1.99","currency":"EUR","availability":"in_stock","observedAt":"2026-01-01T12:00:00Z"}

The import is the operator's: it may write offers and names of any merchant, and its titles, brands and images
replace those any feed source gave (feed sources write only their own merchants; see feeds --help).
Without --format, FILE.csv is CSV, other files are NDJSON, and standard input is detected from its first line.
An import with rejected lines exits 1 (after importing the valid lines) unless --allow-rejects is given.`;

export const importCommand: Command = {
  name: "import",
  summary: "Import an offer feed (NDJSON or CSV; - reads standard input)",
  usage: "import FILE.ndjson|FILE.csv|- [--format ndjson|csv] [--allow-rejects] [--json]",
  details: FEED_FIELDS,
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "import", { format: { type: "string" }, "allow-rejects": { type: "boolean", default: false } });
    const file = positionals[0];
    if (file === undefined) throw new UsageError(`import needs a FILE (or - for standard input); see ${programName()} import --help`);
    if (values.format !== undefined && values.format !== "ndjson" && values.format !== "csv") throw new UsageError("--format must be ndjson or csv");
    let stream: ReadableStream<Uint8Array>;
    let format: FeedFormat | undefined = values.format;
    if (file === "-") {
      const detected = await detectFormat(Bun.stdin.stream());
      stream = detected.stream;
      format ??= detected.format;
    } else {
      const handle = Bun.file(file);
      if (!(await handle.exists())) throw new UsageError(`${file}: no such file`);
      stream = handle.stream();
      format ??= formatFromFileName(file);
    }
    const progress = importProgressLine(context, values.json === true);
    const report = await importFeed(await context.store(), stream, { format, now: Date.now(), onProgress: progress.update }).finally(() => progress.done());
    const rejectedLines = report.rejected.map((r) => `line ${r.line}: ${r.error}`).join("\n");
    const { rejectedCount: _count, ...printed } = report;
    output(
      context,
      values.json === true,
      printed,
      `read ${report.read}, products ${report.products}, offers ${report.offers}, rejected ${report.rejected.length}${rejectedLines ? `\n${rejectedLines}` : ""}`,
    );
    if (report.rejected.length > 0 && values["allow-rejects"] !== true) {
      console.error(
        `price-service: ${report.rejected.length} line(s) rejected (the valid lines were imported); fix them and import again, or pass --allow-rejects to accept this`,
      );
      return 1;
    }
    return 0;
  },
};

/**
 * Reads standard input up to its first non-blank byte and tells NDJSON (a line starting with "{") from CSV
 * (anything else, a header row); the returned stream still yields every byte.
 */
async function detectFormat(input: ReadableStream<Uint8Array>): Promise<{ format: FeedFormat; stream: ReadableStream<Uint8Array> }> {
  const reader = input.getReader();
  const head: Uint8Array[] = [];
  const decoder = new TextDecoder();
  let text = "";
  while (text.trimStart() === "") {
    const { done, value } = await reader.read();
    if (done) break;
    head.push(value);
    text += decoder.decode(value, { stream: true });
  }
  const format: FeedFormat = text.trimStart() === "" || text.trimStart().startsWith("{") ? "ndjson" : "csv";
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of head) controller.enqueue(chunk);
    },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return { format, stream };
}

/** Redraws of the import progress line at most this often: a batch is written every few milliseconds. */
const PROGRESS_INTERVAL_MS = 200;

/**
 * The progress line of an import (`import`, `feeds run`): records read, offers, rejected lines, the
 * rate since it started and the bytes read, each update after the first at most every
 * PROGRESS_INTERVAL_MS. Shown on a terminal only, like every progress line.
 */
export function importProgressLine(
  context: CommandContext,
  json: boolean,
  label = "importing",
): { update(report: Readonly<ImportReport>, bytesRead: number): void; done(): void } {
  const line = progressLine(context, json);
  const startedAt = performance.now();
  let shownAt = Number.NEGATIVE_INFINITY;
  return {
    update: (report, bytesRead) => {
      const now = performance.now();
      if (now - shownAt < PROGRESS_INTERVAL_MS) return;
      shownAt = now;
      const rate = Math.round(report.read / Math.max((now - startedAt) / 1000, 0.001));
      line.update(
        `${label}: ${report.read} records, ${report.offers} offers, ${report.rejectedCount} rejected, ${rate} records/s, ${formatBytes(bytesRead)} read`,
      );
    },
    done: line.done,
  };
}

function formatBytes(bytes: number): string {
  if (bytes < 1000) return `${bytes} B`;
  if (bytes < 1_000_000) return `${(bytes / 1000).toFixed(1)} kB`;
  return `${(bytes / 1_000_000).toFixed(1)} MB`;
}
