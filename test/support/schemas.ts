// PostgreSQL schemas for tests: each store, instance group or simulation seed gets a schema of its
// own on TEST_DATABASE_URL. Under the test runner (whose preload, cleanup.ts, drops what is left at
// the end) a test store's schema is emptied when its store closes and reused by the next store of
// the same process: migrating a new schema costs some 300 ms of DDL, emptying one about 10 ms, and
// the suite opens hundreds of stores. A schema whose structure a test changed (a trigger that fails
// writes, a renamed table) is dropped instead.
import { openPostgresClient } from "../../src/db/postgres-client";
import { applyPostgresMigrations } from "../../src/db/migrate";

/**
 * Creates an empty schema and returns TEST_DATABASE_URL with it as the search_path, and an
 * application_name of its own (`price-service.<schema>`), so a test that ends backends ends only its
 * own (testApplicationName) and never another run's on the same server.
 */
export async function createTestSchema(databaseUrl: string): Promise<string> {
  const name = `test_${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
  const admin = openPostgresClient(databaseUrl, { max: 1 });
  try {
    await admin.unsafe(`CREATE SCHEMA "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(databaseUrl);
  url.searchParams.set("search_path", name);
  url.searchParams.set("application_name", `price-service.${name}`);
  return url.toString();
}

/** The application_name of the connections opened on a test schema's URL (createTestSchema). */
export function testApplicationName(schemaURL: string): string {
  const name = new URL(schemaURL).searchParams.get("application_name");
  if (name === null) throw new Error("testApplicationName: not a test schema's URL");
  return name;
}

export async function dropTestSchema(schemaURL: string): Promise<void> {
  const url = new URL(schemaURL);
  const name = url.searchParams.get("search_path")!;
  url.searchParams.delete("search_path");
  url.searchParams.delete("application_name");
  const admin = openPostgresClient(url.toString(), { max: 1 });
  try {
    await admin.unsafe(`DROP SCHEMA IF EXISTS "${name}" CASCADE`);
  } finally {
    await admin.end();
  }
}

/** Emptied schemas ready for reuse, and what a freshly migrated one looks like. */
const spared: string[] = [];
let sparing = false;
let fresh: { fingerprint: string; emptying: string } | null = null;

/** A migrated, empty schema of its own: a spared one, or a new one. */
export async function takeMigratedSchema(databaseUrl: string): Promise<string> {
  const reused = spared.pop();
  if (reused !== undefined) return reused;
  const schemaURL = await createTestSchema(databaseUrl);
  await applyPostgresMigrations(schemaURL);
  // Only a schema that may be reused needs comparing with a fresh one.
  if (sparing) fresh ??= await describeFresh(schemaURL);
  return schemaURL;
}

/** Keeps a closed store's schema for reuse, emptied; drops it outside the test runner, or when its structure changed or emptying fails. */
export async function giveBackSchema(schemaURL: string): Promise<void> {
  if (sparing && (await emptied(schemaURL))) spared.push(schemaURL);
  else await dropTestSchema(schemaURL);
}

/** Brings the schema back to a freshly migrated one's state, and says whether it could. */
async function emptied(schemaURL: string): Promise<boolean> {
  const client = openPostgresClient(schemaURL, { max: 1 });
  try {
    if (fresh === null || (await fingerprint(client)) !== fresh.fingerprint) return false;
    await client.unsafe(fresh.emptying);
    return true;
  } catch {
    return false;
  } finally {
    await client.end();
  }
}

/** From now on a closed test store's schema is kept for reuse (see dropSparedSchemas). */
export function spareClosedSchemas(): void {
  sparing = true;
}

export async function dropSparedSchemas(): Promise<void> {
  for (const schemaURL of spared.splice(0)) await dropTestSchema(schemaURL);
}

/** A digest of the schema's tables, columns, constraints, indexes, triggers and functions. */
async function fingerprint(client: ReturnType<typeof openPostgresClient>): Promise<string> {
  const [row] = await client<Array<{ digest: string }>>`
    SELECT md5(concat_ws('|',
      (SELECT string_agg(c.relname || ':' || c.relkind::text || ':' || coalesce(c.relacl::text, ''), ',' ORDER BY c.relname)
         FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace),
      (SELECT string_agg(c.relname || '.' || a.attname || ':' || format_type(a.atttypid, a.atttypmod) || ':' || a.attnotnull::text || ':' || coalesce(pg_get_expr(d.adbin, d.adrelid), ''), ',' ORDER BY c.relname, a.attnum)
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped),
      (SELECT string_agg(n.conname || ':' || pg_get_constraintdef(n.oid), ',' ORDER BY n.conname) FROM pg_constraint n WHERE n.connamespace = current_schema()::regnamespace),
      (SELECT string_agg(pg_get_indexdef(i.indexrelid), ',' ORDER BY 1) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = current_schema()::regnamespace),
      (SELECT string_agg(t.tgname || ':' || t.tgenabled::text || ':' || pg_get_triggerdef(t.oid), ',' ORDER BY t.tgname)
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = current_schema()::regnamespace),
      (SELECT string_agg(p.proname || ':' || md5(p.prosrc), ',' ORDER BY p.proname) FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace)
    )) AS digest`;
  return row!.digest;
}

/**
 * A freshly migrated schema's fingerprint, and the statements that bring a used one back to it:
 * every table but the migrations' emptied, those that reference others first, and every sequence
 * restarted (migrations insert no rows).
 */
async function describeFresh(schemaURL: string): Promise<{ fingerprint: string; emptying: string }> {
  const client = openPostgresClient(schemaURL, { max: 1 });
  try {
    const tables = await client<Array<{ name: string; parents: string[] }>>`
      SELECT c.relname AS name, coalesce(array_agg(r.relname) FILTER (WHERE r.oid IS NOT NULL AND r.oid <> c.oid), '{}') AS parents
      FROM pg_class c
      LEFT JOIN pg_constraint f ON f.conrelid = c.oid AND f.contype = 'f'
      LEFT JOIN pg_class r ON r.oid = f.confrelid
      WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relname <> '__drizzle_migrations'
      GROUP BY c.relname`;
    const deletes = deletionOrder(tables).map((name) => `DELETE FROM "${name}";`);
    const restarts = `SELECT setval(c.oid, s.seqstart, false) FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
      WHERE c.relnamespace = current_schema()::regnamespace AND c.relname NOT LIKE '\\_\\_drizzle%';`;
    return { fingerprint: await fingerprint(client), emptying: ["SET lock_timeout = '2s';", ...deletes, restarts].join("\n") };
  } finally {
    await client.end();
  }
}

/** Table names in an order that deletes every referencing table before the tables it references. */
function deletionOrder(tables: Array<{ name: string; parents: string[] }>): string[] {
  const order: string[] = [];
  let remaining = tables;
  while (remaining.length > 0) {
    const referenced = new Set(remaining.flatMap((table) => table.parents));
    const free = remaining.filter((table) => !referenced.has(table.name));
    if (free.length === 0) throw new Error("deletionOrder: the tables' foreign keys form a cycle");
    order.push(...free.map((table) => table.name));
    remaining = remaining.filter((table) => referenced.has(table.name));
  }
  return order;
}
