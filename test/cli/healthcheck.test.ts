import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startServer, type RunningServer } from "../../src/server";
import { createTestContext } from "../support/context";
import { runCLIAsync } from "../support/service-process";

let server: RunningServer;
beforeAll(async () => {
  server = await startServer((await createTestContext()).services, { port: 0, hostname: "127.0.0.1" });
});
afterAll(async () => {
  await server.stop();
});

describe("price-service healthcheck (the Docker HEALTHCHECK)", () => {
  test("exits 0 when the server on PORT answers /healthz, and with --ready when it answers /readyz", async () => {
    const live = await runCLIAsync(["healthcheck"], { PORT: String(server.port) });
    expect(live).toMatchObject({ code: 0, stdout: "/healthz ok\n" });
    const ready = await runCLIAsync(["healthcheck", "--ready"], { PORT: String(server.port) });
    expect(ready).toMatchObject({ code: 0, stdout: "/readyz ok\n" });
  });

  test("exits 1 with a one-line error when nothing answers on PORT", async () => {
    const listener = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const unused = listener.port;
    listener.stop(true);
    const result = await runCLIAsync(["healthcheck", "--timeout", "500"], { PORT: String(unused) });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`http://127.0.0.1:${unused}/healthz did not answer`);
    expect(result.stderr.trim().split("\n")).toHaveLength(1);
  });

  test("backup and healthcheck have --help, and the program's help lists them", async () => {
    for (const command of ["backup", "healthcheck"]) {
      const help = await runCLIAsync([command, "--help"], {});
      expect(help.code).toBe(0);
      expect(help.stdout).toContain("Usage:");
      expect((await runCLIAsync(["--help"], {})).stdout).toContain(`  ${command} `);
    }
  });
});
