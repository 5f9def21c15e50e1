/**
 * Whether a list answers CSV rather than JSON: `format` decides when given; otherwise the Accept
 * header, by quality, with JSON winning ties and being the answer when Accept names neither.
 */
export function wantsCSV(format: "json" | "csv" | undefined, accept: string | null): boolean {
  if (format !== undefined) return format === "csv";
  if (accept === null) return false;
  let csv = 0;
  let json = 0;
  let wildcard = 0;
  for (const range of accept.split(",")) {
    const [type = "", ...parameters] = range.split(";").map((part) => part.trim().toLowerCase());
    const qParameter = parameters.find((parameter) => parameter.startsWith("q="));
    const q = qParameter === undefined ? 1 : Number(qParameter.slice(2));
    if (!Number.isFinite(q)) continue;
    if (type === "text/csv") csv = Math.max(csv, q);
    else if (type === "application/json") json = Math.max(json, q);
    else if (type === "*/*" || type === "application/*") wildcard = Math.max(wildcard, q);
  }
  return csv > 0 && csv > Math.max(json, wildcard);
}
