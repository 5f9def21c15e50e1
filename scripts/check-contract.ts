// Checks the published contract with two independent linters, Spectral and Redocly
// (tools/contract.ts), on the /openapi.json the app serves. Fails on any error; warnings are
// printed (the README lists the ones kept and why). Usage: bun scripts/check-contract.ts [--out openapi.json]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lintContract, servedDocument } from "../tools/contract";

const outIndex = process.argv.indexOf("--out");
const directory = mkdtempSync(join(tmpdir(), "contract-"));
const documentPath = outIndex === -1 ? join(directory, "openapi.json") : process.argv[outIndex + 1]!;
try {
  await Bun.write(documentPath, JSON.stringify(await servedDocument(), null, 2));
  const runs = await lintContract(documentPath);
  for (const { tool, ok, output } of runs) console.log(`--- ${tool}: ${ok ? "no errors" : "FAILED"}\n${output}`);
  process.exitCode = runs.every((entry) => entry.ok) ? 0 : 1;
} finally {
  rmSync(directory, { recursive: true, force: true });
}
