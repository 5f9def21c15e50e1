import { afterEach, beforeEach, describe, expect, test } from "bun:test";
import { UsageError } from "../../src/cli/command";
import { orgsCommand } from "../../src/cli/commands/orgs";
import { loadConfig } from "../../src/config";
import { SQLiteStore } from "../../src/db/sqlite-store";

let store: SQLiteStore;

beforeEach(() => {
  store = SQLiteStore.open("sqlite::memory:");
});

afterEach(async () => {
  await store.close();
});

async function orgs(...args: string[]): Promise<string> {
  const lines: string[] = [];
  await orgsCommand.run({ args, config: loadConfig({}), store: async () => store, out: (text) => lines.push(text) });
  return lines.join("\n");
}

function signInAs(email: string) {
  return store.signInSubject({ subject: `test#${email}`, email, name: email, newOrganizationName: email, trialCredits: 0, now: Date.now() });
}

describe("price-service orgs add-member", () => {
  test("it records an invitation, and the invited person joins the organization on first sign-in", async () => {
    const organization = JSON.parse(await orgs("create", "--name", "Acme", "--json"));
    const invitation = JSON.parse(await orgs("add-member", "--org", organization.id, "--email", "Grace@Example.com", "--json"));
    expect(invitation).toEqual({ email: "grace@example.com", organizationId: organization.id, role: "member", createdAt: expect.stringMatching(/Z$/) });
    const result = await signInAs("grace@example.com");
    expect(result.outcome).toBe("joined");
    expect(result.outcome !== "email-taken" && result.user).toMatchObject({ organizationId: organization.id, role: "member" });
  });

  test("--role owner invites an owner, and inviting again replaces the invitation", async () => {
    const first = JSON.parse(await orgs("create", "--name", "First", "--json"));
    const second = JSON.parse(await orgs("create", "--name", "Second", "--json"));
    await orgs("add-member", "--org", first.id, "--email", "lin@example.com");
    expect(await orgs("add-member", "--org", second.id, "--email", "lin@example.com", "--role", "owner")).toBe(
      `invited lin@example.com to ${second.id} as owner; they join on their first sign-in`,
    );
    const result = await signInAs("lin@example.com");
    expect(result.outcome !== "email-taken" && result.user).toMatchObject({ organizationId: second.id, role: "owner" });
  });

  test("it refuses an unknown organization, a bad email or role, and a person who already signed in", async () => {
    const organization = JSON.parse(await orgs("create", "--name", "Acme", "--json"));
    await signInAs("taken@example.com");
    const attempts = [
      ["add-member", "--org", "org_nope", "--email", "a@example.com"],
      ["add-member", "--org", organization.id, "--email", "not-an-email"],
      ["add-member", "--org", organization.id, "--email", "a@example.com", "--role", "admin"],
      ["add-member", "--org", organization.id],
      ["add-member", "--org", organization.id, "--email", "taken@example.com"],
    ];
    for (const args of attempts) await expect(orgs(...args)).rejects.toBeInstanceOf(UsageError);
    await expect(orgs("add-member", "--org", organization.id, "--email", "taken@example.com")).rejects.toThrow(
      "taken@example.com has already signed in and belongs to another organization",
    );
    expect(store.connection.query("SELECT * FROM invitations").all()).toEqual([]);
  });
});
