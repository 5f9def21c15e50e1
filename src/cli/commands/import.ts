import { parseArgs } from "node:util";
import { formatFromFileName, importFeed } from "../../modules/ingest/import-feed";
import { type Command, output, UsageError } from "../command";

export const importCommand: Command = {
  name: "import",
  summary: "Import an offer feed (NDJSON or CSV; - reads standard input)",
  usage: "import FILE.ndjson|FILE.csv|- [--format ndjson|csv] [--json]",
  async run(context) {
    const { values, positionals } = parseArgs({
      args: context.args,
      options: { format: { type: "string" }, json: { type: "boolean", default: false } },
      allowPositionals: true,
    });
    const file = positionals[0];
    if (file === undefined) throw new UsageError("import needs a FILE (or - for standard input)");
    const format = values.format ?? formatFromFileName(file);
    if (format !== "ndjson" && format !== "csv") throw new UsageError("--format must be ndjson or csv");
    let stream: ReadableStream<Uint8Array>;
    if (file === "-") stream = Bun.stdin.stream();
    else {
      const handle = Bun.file(file);
      if (!(await handle.exists())) throw new UsageError(`${file}: no such file`);
      stream = handle.stream();
    }
    const report = await importFeed(await context.store(), stream, { format, now: Date.now() });
    const rejectedLines = report.rejected.map((r) => `line ${r.line}: ${r.error}`).join("\n");
    output(
      context,
      values.json === true,
      report,
      `read ${report.read}, products ${report.products}, offers ${report.offers}, rejected ${report.rejected.length}${rejectedLines ? `\n${rejectedLines}` : ""}`,
    );
  },
};
