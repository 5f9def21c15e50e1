import { toISO } from "../../lib/clock";
import { normalizeEmail } from "../../modules/auth/service";
import { type Command, output, requireOption, UsageError, parseCommandArgs, programName } from "../command";

export const orgsCommand: Command = {
  name: "orgs",
  summary: "Create and list organizations, invite members",
  usage:
    "orgs create --name NAME [--json]\n  orgs list [--json]\n  orgs add-member --org ORG_ID --email EMAIL [--role member|owner] [--json]   (an invitation: the person joins on first sign-in)",
  async run(context) {
    const { values, positionals } = parseCommandArgs(context, "orgs", {
      name: { type: "string" },
      org: { type: "string" },
      email: { type: "string" },
      role: { type: "string", default: "member" },
    });
    const store = await context.store();
    const json = values.json === true;
    switch (positionals[0]) {
      case "create": {
        const name = requireOption(values, "name");
        if (name.length > 200) throw new UsageError("--name must be at most 200 characters");
        const organization = await store.createOrganization({ name, now: Date.now() });
        output(context, json, { id: organization.id, name: organization.name }, `${organization.id}\t${organization.name}`);
        return;
      }
      case "list": {
        const organizations = await store.listOrganizations();
        const items = organizations.map((o) => ({ id: o.id, name: o.name, createdAt: toISO(o.createdAt) }));
        output(
          context,
          json,
          items,
          items.length === 0
            ? `no organizations yet; create one with ${programName()} orgs create --name NAME`
            : items.map((o) => `${o.id}\t${o.name}`).join("\n"),
        );
        return;
      }
      case "add-member": {
        const organizationId = requireOption(values, "org");
        const email = normalizeEmail(requireOption(values, "email"));
        if (!/^[^\s@]+@[^\s@]+$/.test(email) || email.length > 254) throw new UsageError(`--email must be an email address, got "${email}"`);
        const role = values.role;
        if (role !== "member" && role !== "owner") throw new UsageError(`--role must be member or owner, got "${role}"`);
        if ((await store.getOrganization(organizationId)) === null)
          throw new UsageError(`organization ${organizationId} does not exist; orgs list shows the ids`);
        // A user belongs to one organization, taken at first sign-in; an invitation cannot move them.
        const existing = await store.getUserByEmail(email);
        if (existing !== null) {
          throw new UsageError(
            existing.organizationId === organizationId
              ? `${email} is already a member of ${organizationId}`
              : `${email} has already signed in and belongs to another organization`,
          );
        }
        const invitation = await store.upsertInvitation({ email, organizationId, role, createdAt: Date.now() });
        output(
          context,
          json,
          { email: invitation.email, organizationId: invitation.organizationId, role: invitation.role, createdAt: toISO(invitation.createdAt) },
          `invited ${email} to ${organizationId} as ${role}; they join on their first sign-in`,
        );
        return;
      }
      default:
        throw new UsageError(`unknown subcommand "${positionals[0] ?? ""}"; use create, list or add-member`);
    }
  },
};
