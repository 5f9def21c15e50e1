import { BILLED_REASON, HOUR_MS, type Store, type UsageTotal } from "../../db/store";
import type { Clock } from "../../lib/clock";
import { toISO } from "../../lib/clock";
import { Problem } from "../../http/problem";

const DAY_MS = 24 * HOUR_MS;
const PERIOD_MS = { hour: HOUR_MS, day: DAY_MS } as const;
/** The longest range per granularity: 744 hourly or 366 daily periods. */
const MAX_RANGE_MS = { hour: 31 * DAY_MS, day: 366 * DAY_MS } as const;
const DEFAULT_RANGE_MS = { hour: DAY_MS, day: 30 * DAY_MS } as const;

type Granularity = keyof typeof PERIOD_MS;
type Grouping = "reason" | "key";

interface Figures {
  requests: number;
  billedRequests: number;
  creditsConsumed: number;
  reasons: Record<string, number>;
}

function figures(): Figures {
  return { requests: 0, billedRequests: 0, creditsConsumed: 0, reasons: {} };
}

function add(into: Figures, row: UsageTotal): void {
  into.requests += row.requests;
  if (row.reason === BILLED_REASON) into.billedRequests += row.requests;
  into.creditsConsumed += row.credits;
  into.reasons[row.reason] = (into.reasons[row.reason] ?? 0) + row.requests;
}

function instant(value: string, name: string): number {
  const ms = Date.parse(value);
  if (Number.isNaN(ms))
    throw new Problem("invalid-parameter", { detail: { en: `${name} must be an ISO 8601 date-time.`, fr: `${name} doit être une date ISO 8601.` } });
  return ms;
}

const floorTo = (ms: number, period: number): number => ms - (((ms % period) + period) % period);
const ceilTo = (ms: number, period: number): number => (floorTo(ms, period) === ms ? ms : floorTo(ms, period) + period);

/**
 * Requests per period and reason, and the credits they consumed, from the hourly usage counters
 * (never the ledger, so the cost does not grow with the number of requests). Periods are UTC
 * hours or days; every period of the range is listed, empty ones as zeros.
 */
export async function usageReport(
  deps: { store: Store; clock: Clock },
  organizationId: string,
  query: { from?: string; to?: string; granularity?: Granularity; groupBy?: Grouping },
) {
  const granularity = query.granularity ?? "day";
  const groupBy = query.groupBy ?? "reason";
  const period = PERIOD_MS[granularity];
  const to = ceilTo(query.to === undefined ? deps.clock.now() + 1 : instant(query.to, "to"), period);
  const from = floorTo(query.from === undefined ? to - DEFAULT_RANGE_MS[granularity] : instant(query.from, "from"), period);
  if (from >= to) throw new Problem("invalid-parameter", { detail: { en: "from must be before to.", fr: "from doit être antérieur à to." } });
  if (to - from > MAX_RANGE_MS[granularity]) {
    throw new Problem("invalid-parameter", {
      detail: {
        en: `The range is too long for granularity=${granularity}: at most ${MAX_RANGE_MS[granularity] / DAY_MS} days.`,
        fr: `La période est trop longue pour granularity=${granularity} : ${MAX_RANGE_MS[granularity] / DAY_MS} jours au plus.`,
      },
    });
  }

  const rows = await deps.store.usageTotals(organizationId, { from, to, periodMs: period, byKey: groupBy === "key" });
  const totals = figures();
  const periods = new Map<number, Figures & { keys?: Map<string, Figures> }>();
  for (let start = from; start < to; start += period) periods.set(start, groupBy === "key" ? { ...figures(), keys: new Map() } : figures());
  for (const row of rows) {
    const entry = periods.get(row.periodStart);
    if (entry === undefined) continue;
    add(totals, row);
    add(entry, row);
    if (entry.keys !== undefined) {
      let perKey = entry.keys.get(row.keyId);
      if (perKey === undefined) entry.keys.set(row.keyId, (perKey = figures()));
      add(perKey, row);
    }
  }

  const keyIds = new Set(groupBy === "key" ? rows.map((row) => row.keyId).filter((id) => id !== "") : []);
  const keys = await Promise.all([...keyIds].sort().map((id) => deps.store.getApiKey(organizationId, id)));
  return {
    from: toISO(from),
    to: toISO(to),
    granularity,
    groupBy,
    totals,
    periods: [...periods].map(([start, entry]) => {
      const { keys: perKey, ...rest } = entry;
      const base = { start: toISO(start), end: toISO(start + period), ...rest };
      if (perKey === undefined) return base;
      return {
        ...base,
        keys: [...perKey]
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .map(([keyId, keyFigures]) => ({ keyId: keyId === "" ? null : keyId, ...keyFigures })),
      };
    }),
    ...(groupBy === "key" ? { keys: keys.flatMap((key) => (key === null ? [] : [{ id: key.id, name: key.name, keyPrefix: key.keyPrefix }])) } : {}),
  };
}
