const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** Parses "24h", "90s", "15m", "7d", "500ms" or a bare number of seconds. Null when malformed. */
export function parseDuration(value: string): number | null {
  const match = /^(\d+)(ms|s|m|h|d)?$/.exec(value.trim());
  if (match === null) return null;
  const amount = Number(match[1]);
  return amount * UNIT_MS[match[2] ?? "s"]!;
}
