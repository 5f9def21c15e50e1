import { describe, expect, test } from "bun:test";
import { Validator } from "@seriousme/openapi-schema-validator";
import { createTestContext, json } from "../support/context";

describe("the OpenAPI document, for the session and key endpoints", () => {
  test("it is valid OpenAPI and lists every session and key operation with its session security and error responses", async () => {
    const context = await createTestContext();
    const document = await json(await context.request("/openapi.json"));
    const result = await new Validator().validate(document);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);

    const operations = Object.entries<Record<string, any>>(document.paths).flatMap(([path, methods]) =>
      Object.entries(methods).map(([method, operation]) => ({ path, method, ...operation })),
    );
    const byId = (id: string) => operations.find((operation) => operation.operationId === id)!;
    for (const id of ["listApiKeys", "createApiKey", "rotateApiKey", "revokeApiKey", "refreshSession", "signOut", "getCurrentUser"]) {
      expect(byId(id).security).toEqual([{ session: [] }]);
      expect(Object.keys(byId(id).responses)).toEqual(expect.arrayContaining(["401", "403"]));
      expect(byId(id).tags).toHaveLength(1);
      expect(byId(id).summary).toBeString();
    }
    expect(byId("signInWithOIDC")).toMatchObject({ path: "/api/v1/auth/oidc", method: "post" });
    expect(Object.keys(byId("rotateApiKey").responses)).toEqual(expect.arrayContaining(["200", "404", "409"]));
    expect(byId("createApiKey").parameters).toEqual([expect.objectContaining({ in: "header", name: "idempotency-key" })]);
    expect(byId("signOut").responses["204"]).toMatchObject({ description: "Signed out; the cookie is cleared" });
    expect(byId("signOut").responses["204"].content).toBeUndefined();
    await context.close();
  });
});
