// Sums the reports the end-to-end harness writes under E2E_PRISM=1 (one JSON line per service the
// suite started) and exits 1 when Prism found a response violation, or when nothing was validated.
const [file] = process.argv.slice(2);
if (file === undefined) throw new Error("usage: bun scripts/prism-report.ts REPORT");
const lines = (await Bun.file(file).text())
  .split("\n")
  .filter(Boolean)
  .map((line) => JSON.parse(line) as { validated: number; direct: number; violations: string[] });
const validated = lines.reduce((total, line) => total + line.validated, 0);
const direct = lines.reduce((total, line) => total + line.direct, 0);
const violations = lines.flatMap((line) => line.violations);
console.log(
  `prism: ${validated} answers validated against /openapi.json, ${direct} sent directly (Prism answers them itself, or they redirect or stream), ${violations.length} response violations`,
);
for (const violation of violations) console.log(`  ${violation}`);
if (validated === 0 || violations.length > 0) process.exit(1);
export {};
