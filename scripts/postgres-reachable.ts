import postgres from "postgres";

/** Where the tests and the mutation runs look for PostgreSQL unless TEST_DATABASE_URL says otherwise. */
export const DEFAULT_POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test";

/**
 * Why no PostgreSQL server answers at the URL, or null when one does. A query, not a bare TCP
 * connect: some networks accept any connection and never answer.
 */
export async function whyNotAnswering(databaseUrl: string): Promise<string | null> {
  const client = postgres(databaseUrl, { max: 1, connect_timeout: 3, onnotice: () => {} });
  try {
    const timeout = Bun.sleep(5000).then(() => Promise.reject(new Error("no answer within 5 s")));
    await Promise.race([client`SELECT 1`, timeout]);
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  } finally {
    void client.end({ timeout: 0 });
  }
}

export async function postgresReachable(databaseUrl = process.env.TEST_DATABASE_URL?.trim() || DEFAULT_POSTGRES_URL): Promise<boolean> {
  return (await whyNotAnswering(databaseUrl)) === null;
}
