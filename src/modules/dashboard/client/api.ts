// The public API of the service, as the dashboard uses it: same-origin fetch with the session
// cookie, answers in the dashboard's language, errors as RFC 9457 problems.
import { language } from "./i18n";

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  requestId?: string;
}

/** A failed call: `problem` is the service's problem body, or null when the service was not reached. */
export class APIError extends Error {
  constructor(
    readonly status: number,
    readonly problem: Problem | null,
  ) {
    super(problem?.detail ?? `HTTP ${status}`);
  }
}

export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

export interface Money {
  amount: number;
  currency: string;
  formatted: string;
}

export interface SessionUser {
  id: string;
  email: string | null;
  name: string;
  organization: { id: string; name: string };
  role: "owner" | "member";
}

export type KeyStatus = "ACTIVE" | "ROTATED" | "REVOKED";

export interface APIKey {
  id: string;
  name: string;
  keyPrefix: string;
  status: KeyStatus;
  createdAt: string;
  lastUsedAt: string | null;
  createdBy: { id: string; name: string; email: string | null };
  replacedBy: string | null;
  expiresAt: string | null;
  monthlyCreditLimit: number | null;
  rateLimit: number | null;
  creditsSpentThisMonth: number;
}

export interface CreatedKey {
  key: APIKey;
  clearKey: string;
}

export interface Bucket {
  id: string;
  source: "pack" | "subscription" | "grant" | "trial";
  granted: number;
  remaining: number;
  expiresAt: string | null;
  createdAt: string;
}

export interface Balance {
  available: number;
  reserved: number;
  buckets: Bucket[];
}

/** GET /customer/billing/usage: per period, requests (billed or not) and credits consumed. */
export interface UsageReport {
  totals: { requests: number; billedRequests: number; creditsConsumed: number };
  periods: Array<{ start: string; end: string; requests: number; billedRequests: number; creditsConsumed: number }>;
}

export interface Transaction {
  id: string;
  type: string;
  amount: number;
  balanceAfter: number;
  description: string;
  createdAt: string;
}

export interface Invoice {
  id: string;
  number: string | null;
  status: "draft" | "open" | "paid" | "void";
  total: Money;
  createdAt: string;
  hostedUrl: string | null;
  pdfUrl: string | null;
}

export interface Catalog {
  creditCost: number;
  packs: Array<{ id: string; name: string; credits: number; price: Money; validityDays: number | null }>;
  plans: Array<{ id: string; name: string; creditsPerPeriod: number; interval: "month" | "year"; price: Money }>;
}

export interface WebhookEndpoint {
  id: string;
  url: string;
  eventTypes: string[];
  status: "enabled" | "disabled";
  failingSince: string | null;
  disabledAt: string | null;
  createdAt: string;
}

export interface EndpointWithSecret {
  endpoint: WebhookEndpoint;
  secret: string;
}

export interface WebhookDelivery {
  eventId: string;
  eventType: string;
  state: "pending" | "delivered" | "failed";
  attempts: number;
  lastStatus: number | null;
  lastResponse: string | null;
  lastAttemptAt: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
}

/** Calls `/api/v1<path>` with the session (or `apiKey`); resolves to the JSON body (null for 204), rejects with an APIError. */
export async function call<T>(
  method: "GET" | "POST" | "PATCH" | "DELETE",
  path: string,
  options: { body?: unknown; idempotencyKey?: string; apiKey?: string } = {},
): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json", "accept-language": language() };
  if (options.body !== undefined) headers["content-type"] = "application/json";
  if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
  // With an API key (the data endpoints), the key alone: no cookie goes along.
  if (options.apiKey !== undefined) headers.authorization = `Bearer ${options.apiKey}`;
  let response: Response;
  try {
    response = await fetch(`/api/v1${path}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
      credentials: options.apiKey === undefined ? "same-origin" : "omit",
    });
  } catch {
    throw new APIError(0, null);
  }
  if (response.status === 204) return null as T;
  const body: unknown = await response.json().catch(() => null);
  if (!response.ok) {
    const problem = body !== null && typeof body === "object" && typeof (body as Problem).detail === "string" ? (body as Problem) : null;
    throw new APIError(response.status, problem);
  }
  return body as T;
}

/** A path with its query string, leaving out absent values. */
export function withQuery(path: string, query: Record<string, string | number | null | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) if (value !== null && value !== undefined) search.set(name, String(value));
  const text = search.toString();
  return text === "" ? path : `${path}?${text}`;
}
