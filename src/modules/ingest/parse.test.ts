import { describe, expect, test } from "bun:test";
import { MAX_RECORD_CHARS, type NumberedRecord, readCSV, readNDJSON } from "./parse";

function streamOf(...chunks: Array<string | Uint8Array>): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return new ReadableStream({
    start(controller): void {
      for (const chunk of chunks) controller.enqueue(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      controller.close();
    },
  });
}

/** The same text cut into one-byte chunks, so every boundary (inside a UTF-8 character too) is crossed. */
function byteByByte(text: string): ReadableStream<Uint8Array> {
  const bytes = new TextEncoder().encode(text);
  return streamOf(...Array.from(bytes, (byte) => Uint8Array.of(byte)));
}

async function collect(chunks: AsyncIterable<NumberedRecord[]>): Promise<NumberedRecord[]> {
  const collected: NumberedRecord[] = [];
  for await (const records of chunks) collected.push(...records);
  return collected;
}

describe("readNDJSON", () => {
  test("yields each object with its line number, counting from 1", async () => {
    const records = await collect(readNDJSON(streamOf('{"a":1}\n{"a":2}\n')));
    expect(records).toEqual([
      { line: 1, value: { a: 1 } },
      { line: 2, value: { a: 2 } },
    ]);
  });

  test("blank lines are skipped but still counted", async () => {
    const records = await collect(readNDJSON(streamOf('\n{"a":1}\n  \n\n{"a":2}\n\n')));
    expect(records.map((record) => record.line)).toEqual([2, 5]);
  });

  test("CRLF line endings and a last line without a newline are read", async () => {
    const records = await collect(readNDJSON(streamOf('{"a":1}\r\n{"a":2}')));
    expect(records).toEqual([
      { line: 1, value: { a: 1 } },
      { line: 2, value: { a: 2 } },
    ]);
  });

  test("a line that is not JSON is an error and its neighbours are still read", async () => {
    const records = await collect(readNDJSON(streamOf('{"a":1}\n{"a":\n{"a":3}\n')));
    expect(records).toEqual([
      { line: 1, value: { a: 1 } },
      { line: 2, error: "not valid JSON" },
      { line: 3, value: { a: 3 } },
    ]);
  });

  test.each(["[1,2]", "42", '"text"', "null", "true"])("the JSON value %s is an error because it is not an object", async (line) => {
    expect(await collect(readNDJSON(streamOf(`${line}\n`)))).toEqual([{ line: 1, error: "not a JSON object" }]);
  });

  test("records and multi-byte characters split across chunks are put back together", async () => {
    const text = '{"title":"Crème brûlée 🍮"}\n{"title":"二"}\n';
    expect(await collect(readNDJSON(byteByByte(text)))).toEqual([
      { line: 1, value: { title: "Crème brûlée 🍮" } },
      { line: 2, value: { title: "二" } },
    ]);
  });

  test("a byte order mark at the start is ignored", async () => {
    expect(await collect(readNDJSON(streamOf('\uFEFF{"a":1}\n')))).toEqual([{ line: 1, value: { a: 1 } }]);
  });

  test("an over-long line is reported without being buffered and the next line is still read", async () => {
    const longLine = `{"a":"${"x".repeat(MAX_RECORD_CHARS)}"}`;
    const chunks = [...longLine.match(/[\s\S]{1,65536}/g)!, '\n{"a":2}\n'];
    expect(await collect(readNDJSON(streamOf(...chunks)))).toEqual([
      { line: 1, error: `record is longer than ${MAX_RECORD_CHARS} characters` },
      { line: 2, value: { a: 2 } },
    ]);
  });

  test("an empty input yields nothing", async () => {
    expect(await collect(readNDJSON(streamOf()))).toEqual([]);
  });
});

describe("readCSV", () => {
  test("rows become records keyed by the header's column names", async () => {
    const records = await collect(readCSV(streamOf("gtin,price\n4006381333931,12.99\n96385074,3\n")));
    expect(records).toEqual([
      { line: 2, value: { gtin: "4006381333931", price: "12.99" } },
      { line: 3, value: { gtin: "96385074", price: "3" } },
    ]);
  });

  test("quoted fields keep commas, doubled quotes and line breaks", async () => {
    const csv = 'title,brand\n"Pen, blue","The ""Best"" Co"\n"two\nlines",x\n';
    expect(await collect(readCSV(streamOf(csv)))).toEqual([
      { line: 2, value: { title: "Pen, blue", brand: 'The "Best" Co' } },
      { line: 3, value: { title: "two\nlines", brand: "x" } },
    ]);
  });

  test("a record is reported on the line where it starts, after quoted line breaks", async () => {
    const csv = 'a,b\n"1\n2\n3",x\ny,z\n';
    const records = await collect(readCSV(streamOf(csv)));
    expect(records.map((record) => record.line)).toEqual([2, 5]);
  });

  test("CRLF, LF and CR line endings are all read, and CRLF inside quotes is kept", async () => {
    const csv = 'a,b\r\n1,2\n3,4\r5,"6\r\n7"\r\n';
    expect(await collect(readCSV(streamOf(csv)))).toEqual([
      { line: 2, value: { a: "1", b: "2" } },
      { line: 3, value: { a: "3", b: "4" } },
      { line: 4, value: { a: "5", b: "6\r\n7" } },
    ]);
  });

  test("blank lines are skipped but still counted", async () => {
    const csv = "\na,b\n\n1,2\r\n\r\n3,4";
    const records = await collect(readCSV(streamOf(csv)));
    expect(records).toEqual([
      { line: 4, value: { a: "1", b: "2" } },
      { line: 6, value: { a: "3", b: "4" } },
    ]);
  });

  test("empty fields, quoted or not, are empty strings", async () => {
    expect(await collect(readCSV(streamOf('a,b,c\n,"",\n')))).toEqual([{ line: 2, value: { a: "", b: "", c: "" } }]);
  });

  test("a row with the wrong number of fields is an error and the next row is still read", async () => {
    const records = await collect(readCSV(streamOf("a,b\n1,2,3\n4\n5,6\n")));
    expect(records).toEqual([
      { line: 2, error: "row has 3 fields, the header has 2" },
      { line: 3, error: "row has 1 fields, the header has 2" },
      { line: 4, value: { a: "5", b: "6" } },
    ]);
  });

  test("text after a closing quote makes the row an error", async () => {
    const records = await collect(readCSV(streamOf('a,b\n"1"x,2\n3,4\n')));
    expect(records).toEqual([
      { line: 2, error: "unexpected text after a closing quote" },
      { line: 3, value: { a: "3", b: "4" } },
    ]);
  });

  test("a stray quote inside an unquoted field is kept as text", async () => {
    expect(await collect(readCSV(streamOf('a,b\n12" pipe,2\n')))).toEqual([{ line: 2, value: { a: '12" pipe', b: "2" } }]);
  });

  test("a quote left open at the end is an error on the line where its record starts", async () => {
    const records = await collect(readCSV(streamOf('a,b\n1,2\n"3,4\n5,6\n')));
    expect(records).toEqual([
      { line: 2, value: { a: "1", b: "2" } },
      { line: 3, error: "unterminated quoted field" },
    ]);
  });

  test("header names are trimmed and a byte order mark before them is ignored", async () => {
    expect(await collect(readCSV(streamOf("\uFEFFgtin , price\n1,2\n")))).toEqual([{ line: 2, value: { gtin: "1", price: "2" } }]);
  });

  test("a duplicate column name rejects the file once, on the header line", async () => {
    expect(await collect(readCSV(streamOf("gtin,price,price\n1,2,3\n4,5,6\n")))).toEqual([{ line: 1, error: 'header: duplicate column "price"' }]);
  });

  test("an empty input or a header alone yields nothing", async () => {
    expect(await collect(readCSV(streamOf()))).toEqual([]);
    expect(await collect(readCSV(streamOf("gtin,price\r\n")))).toEqual([]);
  });

  test("reading byte by byte gives the same records as reading at once", async () => {
    const csv = 'title,note\r\n"Crème, ""brûlée""","a\r\nb"\r\n🍮,"x"\r\n';
    const atOnce = await collect(readCSV(streamOf(csv)));
    expect(atOnce).toHaveLength(2);
    expect(await collect(readCSV(byteByByte(csv)))).toEqual(atOnce);
  });

  test("plain and quoted rows, every line ending and blank lines read the same however the text is cut into chunks", async () => {
    // Rows without a quote are split at once when their whole line is in the chunk; the others, and
    // rows cut by a chunk's end, go through the character-by-character state machine.
    const csv = 'a,b\r\n1,2\r\n\r\n3,"x\ny"\n4,5\r6,7\n\n"8",9\r\n10, 11 \n12" in,13\n14,"""q"""\r\n15,16';
    const expected = [
      { line: 2, value: { a: "1", b: "2" } },
      { line: 4, value: { a: "3", b: "x\ny" } },
      { line: 6, value: { a: "4", b: "5" } },
      { line: 7, value: { a: "6", b: "7" } },
      { line: 9, value: { a: "8", b: "9" } },
      { line: 10, value: { a: "10", b: " 11 " } },
      { line: 11, value: { a: '12" in', b: "13" } },
      { line: 12, value: { a: "14", b: '"q"' } },
      { line: 13, value: { a: "15", b: "16" } },
    ];
    for (let size = 1; size <= csv.length; size++) {
      const chunks = Array.from({ length: Math.ceil(csv.length / size) }, (_, index) => csv.slice(index * size, (index + 1) * size));
      expect(await collect(readCSV(streamOf(...chunks)))).toEqual(expected);
    }
  });

  test("a wrong field count on a plain row is reported like on a quoted one", async () => {
    expect(await collect(readCSV(streamOf('a,b\n1,2,3\n"1",2,3\n')))).toEqual([
      { line: 2, error: "row has 3 fields, the header has 2" },
      { line: 3, error: "row has 3 fields, the header has 2" },
    ]);
  });

  test("an over-long row is reported and the next row is still read", async () => {
    const csv = `a,b\n"${"x".repeat(MAX_RECORD_CHARS)}",1\n2,3\n`;
    expect(await collect(readCSV(streamOf(csv)))).toEqual([
      { line: 2, error: `record is longer than ${MAX_RECORD_CHARS} characters` },
      { line: 3, value: { a: "2", b: "3" } },
    ]);
  });
});
