import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createTestContext, json, queryRows, type TestContext } from "../support/context";
import { CLIENT_ID, startTestOpenIDProvider, type TestOpenIDProvider } from "./oidc-provider";

// Invitations and users are matched by email, so only a provider's `email_verified: true` may prove one.
// Each account below is the same address as the invitation, asserted in another way.
const INVITED = "owner@example.com";
let provider: TestOpenIDProvider;

beforeAll(async () => {
  provider = await startTestOpenIDProvider({
    absent: { email: INVITED, claims: { email_verified: undefined } },
    stringFalse: { email: INVITED, claims: { email_verified: "false" } },
    stringTrue: { email: INVITED, claims: { email_verified: "true" } },
    numberOne: { email: INVITED, claims: { email_verified: 1 } },
    unverified: { email: INVITED, emailVerified: false },
    emailArray: { email: INVITED, claims: { email: [INVITED] } },
    nameObject: { email: "named@example.com", claims: { name: { first: "Ada" } } },
    verified: { email: INVITED, name: "Real Owner" },
  });
});

afterAll(async () => {
  await provider.close();
});

async function invitingOrganization(): Promise<{ context: TestContext; organizationId: string }> {
  const context = await createTestContext({ OIDC_ISSUER: provider.issuer, OIDC_CLIENT_ID: CLIENT_ID });
  context.clock.set(Date.now());
  const organization = await context.store.createOrganization({ name: "Inviting Org", now: context.clock.now() });
  await context.store.upsertInvitation({ email: INVITED, organizationId: organization.id, role: "owner", createdAt: context.clock.now() });
  return { context, organizationId: organization.id };
}

async function signIn(context: TestContext, account: string): Promise<Response> {
  const idToken = await provider.idTokenFor(account);
  return context.request("/api/v1/auth/oidc", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ idToken }) });
}

describe("sign-in with an email the provider has not verified", () => {
  for (const [account, claim] of [
    ["absent", "no email_verified claim"],
    ["stringFalse", 'email_verified: "false"'],
    ["stringTrue", 'email_verified: "true" (a string)'],
    ["unverified", "email_verified: false"],
  ] as const) {
    test(`with ${claim}, it is refused with 403, joins nothing, and the verified owner then joins the invitation`, async () => {
      const { context, organizationId } = await invitingOrganization();
      const refused = await signIn(context, account);
      expect(refused.status).toBe(403);
      expect(refused.headers.get("set-cookie")).toBeNull();
      expect(await json(refused)).toMatchObject({ status: 403, detail: expect.stringContaining("email_verified: true") });
      expect(await queryRows(context.store, "SELECT email FROM users WHERE email = ?", [INVITED])).toEqual([]);
      expect(await queryRows(context.store, "SELECT email FROM invitations")).toEqual([{ email: INVITED }]);

      const owner = await signIn(context, "verified");
      expect(owner.status).toBe(200);
      const body = await json(owner);
      expect(body.user).toMatchObject({ email: INVITED, role: "owner", organization: { id: organizationId, name: "Inviting Org" } });
      await context.close();
    });
  }
});

describe("sign-in with identity claims of the wrong type", () => {
  for (const [account, claim] of [
    ["numberOne", "email_verified: 1"],
    ["emailArray", "an email that is an array"],
    ["nameObject", "a name that is an object"],
  ] as const) {
    test(`with ${claim}, the token is refused with 401 and nothing is written`, async () => {
      const { context } = await invitingOrganization();
      const refused = await signIn(context, account);
      expect(refused.status).toBe(401);
      expect(await json(refused)).toMatchObject({ status: 401, type: expect.stringMatching(/\/unauthorized$/) });
      expect(await queryRows(context.store, "SELECT id FROM users WHERE id <> 'usr_system'")).toEqual([]);
      expect(await queryRows(context.store, "SELECT email FROM invitations")).toEqual([{ email: INVITED }]);
      await context.close();
    });
  }
});
