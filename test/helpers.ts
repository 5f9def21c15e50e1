import { createApp } from "../src/app";
import { loadConfig } from "../src/config";
import { SQLiteStore } from "../src/db/sqlite-store";
import { SYSTEM_USER_ID, type FeedRecord, type Store } from "../src/db/store";
import { FakeClock } from "../src/lib/clock";
import { createLogger } from "../src/lib/logger";
import { createApiKey } from "../src/modules/keys/service";
import { developmentIdentity, signIn as signInIdentity } from "../src/modules/auth/service";
import { createServices, type Services } from "../src/services";

export const BASE = "http://localhost";

/** The store a test runs on: in-memory SQLite, or PostgreSQL when TEST_DATABASE_URL names one. */
export async function openTestStore(): Promise<Store> {
  return SQLiteStore.open("sqlite::memory:");
}

export interface TestContext {
  app: ReturnType<typeof createApp>;
  services: Services;
  store: Store;
  clock: FakeClock;
  logs: string[];
  request(path: string, init?: RequestInit): Promise<Response>;
  close(): Promise<void>;
}

/** A whole app on a fresh store with a fake clock and captured logs; `overrides` replaces built services (e.g. the OIDC verifier). */
export async function createTestContext(env: Record<string, string> = {}, overrides: Partial<Pick<Parameters<typeof createServices>[0], "oidc" | "stripe">> = {}): Promise<TestContext> {
  const config = loadConfig({ PRICE_ENV: "development", LOG_LEVEL: "debug", RATE_LIMIT: "100000/s", ...env });
  const store = await openTestStore();
  const clock = new FakeClock();
  const logs: string[] = [];
  const logger = createLogger({ level: config.logLevel, write: (chunk) => logs.push(chunk) });
  const services = createServices({ config, store, clock, logger, ...overrides });
  const app = createApp(services);
  return {
    app,
    services,
    store,
    clock,
    logs,
    request: (path, init) => app.handle(new Request(BASE + path, init)),
    close: () => store.close(),
  };
}

export interface TestOrganization {
  organizationId: string;
  keyId: string;
  clearKey: string;
  auth: { authorization: string };
}

/** An organization with one ACTIVE key and, if asked, a never-expiring grant of credits. */
export async function createOrganization(context: TestContext, credits = 0, name = "Test Org"): Promise<TestOrganization> {
  const { store, clock, services } = context;
  const organization = await store.createOrganization({ name, now: clock.now() });
  if (credits > 0) {
    await store.grantCredits({ organizationId: organization.id, source: "grant", type: "grant", amount: credits, expiresAt: null, description: "test grant", now: clock.now() });
  }
  await store.ensureSystemUser(clock.now());
  const created = await createApiKey(store, { organizationId: organization.id, name: "test key", createdBy: SYSTEM_USER_ID, keyPrefix: services.config.keyPrefix, now: clock.now() });
  return { organizationId: organization.id, keyId: created.key.id, clearKey: created.clearKey, auth: { authorization: `Bearer ${created.clearKey}` } };
}

/** One product (GTIN-14 form) with offers observed `ageMs` before the clock's now. */
export async function addProduct(
  context: TestContext,
  gtin14: string,
  offers: Array<{ merchantId: string; price: number; ageMs: number; currency?: string; availability?: "in_stock" | "out_of_stock" }>,
): Promise<void> {
  const now = context.clock.now();
  const product = { gtin: gtin14, title: `Product ${gtin14}`, brand: "Acme" };
  const records: FeedRecord[] =
    offers.length === 0
      ? [{ product }]
      : offers.map((offer) => ({
          product,
          offer: {
            merchantId: offer.merchantId,
            merchantName: `Merchant ${offer.merchantId}`,
            priceAmount: offer.price,
            currency: offer.currency ?? "EUR",
            shippingAmount: null,
            availability: offer.availability ?? "in_stock",
            condition: "new",
            url: null,
            observedAt: now - offer.ageMs,
          },
        }));
  await context.store.applyFeedRecords(records, now);
}

export async function json<T = any>(response: Response): Promise<T> {
  return (await response.json()) as T;
}

/** Sum of every ledger amount of an organization, paging through all transactions. */
export async function ledgerSum(store: Store, organizationId: string): Promise<number> {
  let sum = 0;
  let after: string | undefined;
  do {
    const page = await store.listTransactions(organizationId, { limit: 100, after });
    for (const transaction of page.items) sum += transaction.amount;
    after = page.nextCursor ?? undefined;
  } while (after !== undefined);
  return sum;
}

export interface TestSession {
  /** Request headers that carry the session cookie. */
  headers: { cookie: string };
  token: string;
  userId: string;
  organizationId: string;
}

/**
 * A signed-in user with a session, made through the sign-in service (so it works whatever sign-in the
 * context allows). With `organizationId` the user joins that organization, as if invited.
 */
export async function signIn(context: TestContext, email: string, options: { organizationId?: string; role?: "owner" | "member" } = {}): Promise<TestSession> {
  const { store, clock, services } = context;
  if (options.organizationId !== undefined) {
    await store.upsertInvitation({ email: email.toLowerCase(), organizationId: options.organizationId, role: options.role ?? "member", createdAt: clock.now() });
  }
  const session = await signInIdentity(
    { store, clock, logger: services.logger, trialCredits: services.config.trialCredits },
    developmentIdentity(email),
    "development",
  );
  return { headers: { cookie: `session=${session.token}` }, token: session.token, userId: session.user.id, organizationId: session.user.organization.id };
}
