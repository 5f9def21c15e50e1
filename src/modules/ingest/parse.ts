/**
 * One record read from a feed, with the line it starts on (from 1). Exactly one of `value` and
 * `error` is set: the record's fields by name, or why the record could not be read.
 */
export interface NumberedRecord {
  line: number;
  value?: Record<string, unknown>;
  error?: string;
}

/**
 * Longest record kept in memory. Without a cap, a file with no line breaks (or a CSV quote that is
 * never closed) would be buffered whole; longer records are reported and skipped instead.
 */
export const MAX_RECORD_CHARS = 1_000_000;

const TOO_LONG = `record is longer than ${MAX_RECORD_CHARS} characters`;

/**
 * Reads newline-delimited JSON objects; blank lines are skipped but still counted. Yields the records
 * of each chunk read together: one await per chunk rather than per record.
 */
export async function* readNDJSON(stream: ReadableStream<Uint8Array>): AsyncGenerator<NumberedRecord[]> {
  let pending = "";
  let isTooLong = false;
  let line = 0;
  for await (const text of decodeText(stream)) {
    const records: NumberedRecord[] = [];
    let start = 0;
    for (let end = text.indexOf("\n"); end !== -1; end = text.indexOf("\n", start)) {
      line++;
      const content = pending === "" ? text.slice(start, end) : pending + text.slice(start, end);
      pending = "";
      start = end + 1;
      const record = isTooLong ? { line, error: TOO_LONG } : parseJSONLine(content, line);
      isTooLong = false;
      if (record !== null) records.push(record);
    }
    pending += text.slice(start);
    if (pending.length > MAX_RECORD_CHARS) {
      isTooLong = true;
      pending = "";
    }
    if (records.length > 0) yield records;
  }
  if (isTooLong) yield [{ line: line + 1, error: TOO_LONG }];
  else {
    const record = parseJSONLine(pending, line + 1);
    if (record !== null) yield [record];
  }
}

/** The record on one NDJSON line, or null for a blank line. */
function parseJSONLine(content: string, line: number): NumberedRecord | null {
  // A record starts with "{"; only other lines need the trim that tells a blank line.
  if (content.charCodeAt(0) !== 123 && content.trim() === "") return null;
  let value: unknown;
  try {
    value = JSON.parse(content);
  } catch {
    return { line, error: "not valid JSON" };
  }
  if (!isJSONObject(value)) return { line, error: "not a JSON object" };
  return { line, value };
}

function isJSONObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Reads RFC 4180 CSV whose first non-blank line is a header naming the columns. Fields may be
 * quoted (holding commas, doubled quotes and line breaks); lines end with CRLF, LF or CR. Each
 * record is reported on the line where it starts; blank lines are skipped but counted. Yields the
 * records of each chunk read together.
 */
export async function* readCSV(stream: ReadableStream<Uint8Array>): AsyncGenerator<NumberedRecord[]> {
  let header: string[] | null = null;
  for await (const rows of readCSVRows(stream)) {
    const records: NumberedRecord[] = [];
    for (const row of rows) {
      if (header === null) {
        const headerError = row.error ?? findHeaderError(row.fields);
        // Without usable column names no row can be read, so one error stands for the whole file.
        if (headerError !== null) {
          yield [{ line: row.line, error: `header: ${headerError}` }];
          return;
        }
        header = row.fields.map((name) => name.trim());
        continue;
      }
      records.push(toNamedRecord(header, row));
    }
    if (records.length > 0) yield records;
  }
}

function findHeaderError(names: string[]): string | null {
  const seen = new Set<string>();
  for (const name of names.map((column) => column.trim())) {
    if (name !== "" && seen.has(name)) return `duplicate column ${JSON.stringify(name)}`;
    seen.add(name);
  }
  return null;
}

function toNamedRecord(header: string[], row: CSVRow): NumberedRecord {
  if (row.error !== null) return { line: row.line, error: row.error };
  if (row.fields.length !== header.length) {
    return { line: row.line, error: `row has ${row.fields.length} fields, the header has ${header.length}` };
  }
  const value: Record<string, unknown> = {};
  for (let index = 0; index < header.length; index++) value[header[index]!] = row.fields[index];
  return { line: row.line, value };
}

interface CSVRow {
  line: number;
  fields: string[];
  error: string | null;
}

async function* readCSVRows(stream: ReadableStream<Uint8Array>): AsyncGenerator<CSVRow[]> {
  const splitter = new CSVRowSplitter();
  for await (const text of decodeText(stream)) yield splitter.push(text);
  yield splitter.finish();
}

type CSVState = "fieldStart" | "unquoted" | "quoted" | "quoteInQuoted";

/**
 * RFC 4180 state machine fed text chunk by chunk, so a row may span chunks. Lenient where
 * spreadsheets are (a stray quote inside an unquoted field is kept as text), strict where the data
 * would otherwise be guessed (text after a closing quote makes the row an error). Most rows hold no
 * quote and end within the chunk: those are split on commas at once, which reads the same fields as
 * the state machine would character by character; any other row goes through the state machine.
 */
class CSVRowSplitter {
  private state: CSVState = "fieldStart";
  private fields: string[] = [];
  private field = "";
  private rowLine = 1;
  private rowChars = 0;
  private rowError: string | null = null;
  private line = 1;
  private previousWasCR = false;
  /** Index of the next quote and CR in the chunk being pushed, -1 when there is none. */
  private nextQuote = -1;
  private nextCR = -1;

  push(text: string): CSVRow[] {
    const rows: CSVRow[] = [];
    this.nextQuote = text.indexOf('"');
    this.nextCR = text.indexOf("\r");
    let index = 0;
    while (index < text.length) {
      if (this.isBlankRow() && this.field === "") {
        const next = this.plainLineEnd(text, index);
        if (next !== -1) {
          const row = this.takePlainLine(text, index, next);
          if (row !== null) rows.push(row);
          index = next + 1;
          continue;
        }
      }
      const row = this.consume(text.charAt(index));
      if (row !== null) rows.push(row);
      index++;
    }
    return rows;
  }

  finish(): CSVRow[] {
    if (this.state === "quoted") {
      this.rowError ??= "unterminated quoted field";
    }
    return this.isBlankRow() ? [] : [this.endRow()];
  }

  /**
   * Where the row starting at `start` ends (its LF), when it ends in `text`, holds no quote and no
   * CR but a CRLF's, and is not over-long; -1 otherwise, and the state machine reads it.
   */
  private plainLineEnd(text: string, start: number): number {
    // The LF of a CRLF whose CR ended the last row belongs to that row.
    if (this.previousWasCR) return -1;
    const end = text.indexOf("\n", start);
    // The state machine counts the line break too: a row of MAX_RECORD_CHARS characters is over-long there.
    if (end === -1 || end - start >= MAX_RECORD_CHARS) return -1;
    // The next quote and CR in the chunk are looked up again only once passed: a chunk is scanned for
    // each once, not once per row.
    if (this.nextQuote !== -1 && this.nextQuote < start) this.nextQuote = text.indexOf('"', start);
    if (this.nextQuote !== -1 && this.nextQuote < end) return -1;
    if (this.nextCR !== -1 && this.nextCR < start) this.nextCR = text.indexOf("\r", start);
    if (this.nextCR !== -1 && this.nextCR < end - 1) return -1;
    return end;
  }

  /** The row on the plain line `text[start, end)` (without its CR), or null for a blank line. */
  private takePlainLine(text: string, start: number, end: number): CSVRow | null {
    const contentEnd = end > start && text.charCodeAt(end - 1) === 13 ? end - 1 : end;
    const row = contentEnd === start ? null : { line: this.rowLine, fields: text.slice(start, contentEnd).split(","), error: null };
    this.line++;
    this.startRow();
    return row;
  }

  private consume(char: string): CSVRow | null {
    const isLineBreak = char === "\n" || char === "\r";
    // CRLF is one line break; the LF after a CR that ended a row must not end an empty one.
    const isLFAfterCR = char === "\n" && this.previousWasCR;
    if (isLineBreak && !isLFAfterCR) this.line++;
    this.previousWasCR = char === "\r";
    this.rowChars++;
    if (this.rowChars > MAX_RECORD_CHARS && this.rowError !== TOO_LONG) {
      this.rowError = TOO_LONG;
      this.fields = [];
      this.field = "";
    }

    switch (this.state) {
      case "quoted":
        if (char === '"') this.state = "quoteInQuoted";
        else this.append(char);
        return null;
      case "quoteInQuoted":
        if (char === '"') {
          this.append('"');
          this.state = "quoted";
          return null;
        }
        if (char !== "," && !isLineBreak) {
          this.rowError ??= "unexpected text after a closing quote";
          this.state = "unquoted";
        }
        break;
      case "fieldStart":
        if (char === '"') {
          this.state = "quoted";
          return null;
        }
        break;
      case "unquoted":
        break;
    }

    if (char === ",") {
      this.endField();
      return null;
    }
    if (isLineBreak) {
      if (isLFAfterCR || this.isBlankRow()) {
        this.startRow();
        return null;
      }
      return this.endRow();
    }
    this.append(char);
    this.state = "unquoted";
    return null;
  }

  private append(text: string): void {
    if (this.rowError !== TOO_LONG) this.field += text;
  }

  private endField(): void {
    if (this.rowError !== TOO_LONG) this.fields.push(this.field);
    this.field = "";
    this.state = "fieldStart";
  }

  private isBlankRow(): boolean {
    return this.state === "fieldStart" && this.fields.length === 0 && this.rowError === null;
  }

  private endRow(): CSVRow {
    this.endField();
    const row = { line: this.rowLine, fields: this.fields, error: this.rowError };
    this.startRow();
    return row;
  }

  private startRow(): void {
    this.fields = [];
    this.field = "";
    this.state = "fieldStart";
    this.rowLine = this.line;
    this.rowChars = 0;
    this.rowError = null;
  }
}

/** Decodes UTF-8 chunk by chunk; a character split across chunks is held back until complete. */
async function* decodeText(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder("utf-8");
  const reader = stream.getReader();
  let isDone = false;
  try {
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      const text = decoder.decode(chunk.value, { stream: true });
      if (text !== "") yield text;
    }
    isDone = true;
    const rest = decoder.decode();
    if (rest !== "") yield rest;
  } finally {
    // A consumer that stops early (or a read that failed) leaves the source open: cancel it so a
    // file handle closes. The cancel's own failure would only hide the error already on its way.
    if (!isDone) await reader.cancel().catch(() => undefined);
    reader.releaseLock();
  }
}
