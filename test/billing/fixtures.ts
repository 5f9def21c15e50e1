import { createOrganization, createTestContext, type TestContext, type TestOrganization } from "../support/context";
import { createSession, type TestSession } from "./session-helper";

export interface BillingFixture {
  context: TestContext;
  org: TestOrganization;
  session: TestSession;
}

/** A test app, an organization with an API key and `credits`, and a signed-in owner. */
export async function billingFixture(options: { credits?: number; env?: Record<string, string> } = {}): Promise<BillingFixture> {
  const context = await createTestContext(options.env);
  const org = await createOrganization(context, options.credits ?? 0);
  return { context, org, session: await createSession(context, org.organizationId) };
}

/** Another organization with its own key and owner, to check that nothing leaks across. */
export async function otherOrganization(context: TestContext, credits = 0): Promise<{ org: TestOrganization; session: TestSession }> {
  const org = await createOrganization(context, credits, "Other Org");
  return { org, session: await createSession(context, org.organizationId) };
}

export function postJSON(context: TestContext, path: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  return context.request(path, { method: "POST", headers: { ...headers, "content-type": "application/json" }, body: JSON.stringify(body) });
}

/** A browser form post: urlencoded, same origin unless the headers say otherwise. */
export function postForm(context: TestContext, path: string, headers: Record<string, string>): Promise<Response> {
  return context.request(path, { method: "POST", headers: { ...headers, "content-type": "application/x-www-form-urlencoded" }, body: "" });
}

export const BILLING = "/api/v1/customer/billing";
export const HOUR = 3_600_000;
export const DAY = 24 * HOUR;
