// The security cases every billing endpoint shares, written once (Unkey's common-tests idea): no
// credential, wrong credential, expired or revoked credential, the credential the endpoint refuses,
// and a cross-site browser request. "Another organization" cases are per endpoint, beside them.
import { expect, test } from "bun:test";
import { SYSTEM_USER_ID } from "../../src/db/store";
import { createApiKey } from "../../src/modules/keys/service";
import { json, type TestContext, type TestOrganization } from "../helpers";
import type { TestSession } from "./session-helper";

export interface SecurityTarget {
  context: TestContext;
  org: TestOrganization;
  session: TestSession;
}

async function expectUnauthorized(response: Response): Promise<void> {
  expect(response.status).toBe(401);
  expect(response.headers.get("content-type")).toStartWith("application/problem+json");
  const body = await json(response);
  expect(body.type).toEndWith("/problems/unauthorized");
  expect(body.status).toBe(401);
}

/**
 * Registers the shared security tests of one endpoint. `send` makes the request with the given
 * headers (and whatever body the endpoint needs); `accepts` is the endpoint's credential rule (docs/api.md).
 */
export function securityTests(get: () => SecurityTarget, accepts: "session" | "sessionOrKey", send: (headers: Record<string, string>) => Promise<Response>, options: { unsafe: boolean }): void {
  test("without any credential it answers 401 unauthorized", async () => {
    await expectUnauthorized(await send({}));
  });

  test("with an unknown session cookie it answers 401", async () => {
    await expectUnauthorized(await send({ cookie: "session=ses_doesnotexist.secretsecret" }));
  });

  test("with a session cookie whose secret is wrong it answers 401", async () => {
    const { session } = get();
    await expectUnauthorized(await send({ cookie: `session=${session.sessionId}.wrongsecret` }));
  });

  test("with an expired session it answers 401", async () => {
    const { context, session } = get();
    context.clock.advance(25 * 3_600_000);
    await expectUnauthorized(await send(session.headers));
  });

  if (accepts === "sessionOrKey") {
    test("with a malformed API key it answers 401 with WWW-Authenticate: Bearer", async () => {
      const response = await send({ authorization: "Bearer pps_not-a-key" });
      expect(response.headers.get("www-authenticate")).toStartWith("Bearer");
      await expectUnauthorized(response);
    });

    test("with a revoked API key it answers 401, even with a valid session cookie beside it", async () => {
      const { context, org, session } = get();
      await context.store.revokeApiKey(org.organizationId, org.keyId);
      await expectUnauthorized(await send({ ...org.auth, ...session.headers }));
    });
  } else {
    test("with an API key instead of a session it answers 401", async () => {
      const { context, org } = get();
      const other = await createApiKey(context.store, { organizationId: org.organizationId, name: "ci", createdBy: SYSTEM_USER_ID, keyPrefix: "pps_", now: context.clock.now() });
      await expectUnauthorized(await send({ authorization: `Bearer ${other.clearKey}` }));
    });
  }

  if (options.unsafe) {
    test("a cross-site browser request with the session cookie is refused with 403 forbidden", async () => {
      const { session } = get();
      const fromElsewhere = await send({ cookie: session.cookie, origin: "https://evil.example" });
      expect(fromElsewhere.status).toBe(403);
      expect((await json(fromElsewhere)).type).toEndWith("/problems/forbidden");
      const crossSite = await send({ cookie: session.cookie, "sec-fetch-site": "cross-site" });
      expect(crossSite.status).toBe(403);
    });
  }
}
