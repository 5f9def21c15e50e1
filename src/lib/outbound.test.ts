import { afterAll, describe, expect, test } from "bun:test";
import { loadConfig } from "../config";
import { createAddressPolicy, createOutboundClient, literalAddress, OutboundRefusal, parseNetwork } from "./outbound";

describe("createAddressPolicy", () => {
  const production = createAddressPolicy({ allowedNetworks: [], allowLoopback: false });

  test("refuses loopback, link-local, private, CGNAT, multicast and unspecified addresses", () => {
    for (const address of [
      "127.0.0.1",
      "10.1.2.3",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "::1",
      "::",
      "fe80::1",
      "fd00::1",
      "::ffff:10.0.0.1",
      "::ffff:127.0.0.1",
    ]) {
      expect({ address, allowed: production.isAllowed(address) }).toEqual({ address, allowed: false });
    }
  });

  test("refuses IPv6 forms that embed an IPv4 address a gateway or tunnel may forward to, like NAT64's 64:ff9b::/96", () => {
    // NAT64, local-use NAT64 (RFC 8215) and IPv4-compatible (deprecated, ::/96) forms of 10.0.0.1 and 127.0.0.1.
    for (const address of ["64:ff9b::a00:1", "64:ff9b:1::a00:1", "::a00:1", "::127.0.0.1"]) {
      expect({ address, allowed: production.isAllowed(address) }).toEqual({ address, allowed: false });
    }
  });

  test("refuses the ranges that translate to IPv4 addresses: IPv4-mapped (any), 6to4, Teredo and the 6to4 relay anycast", () => {
    // ::ffff:8.8.8.8 written both ways, 6to4 of 127.0.0.1, a Teredo address, the 6to4 relay.
    for (const address of ["::ffff:8.8.8.8", "::ffff:808:808", "2002:7f00:1::1", "2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.88.99.1"]) {
      expect({ address, allowed: production.isAllowed(address) }).toEqual({ address, allowed: false });
    }
  });

  test("allows public addresses", () => {
    for (const address of ["93.184.216.34", "172.32.0.1", "8.8.8.8", "2606:4700:4700::1111", "2001:4860:4860::8888"]) {
      expect({ address, allowed: production.isAllowed(address) }).toEqual({ address, allowed: true });
    }
  });

  test("allows the networks OUTBOUND_ALLOWED_NETWORKS lists, and loopback only when told", () => {
    const onPremises = createAddressPolicy({ allowedNetworks: ["10.20.0.0/16", "fd12::/16"], allowLoopback: false });
    expect(onPremises.isAllowed("10.20.3.4")).toBe(true);
    expect(onPremises.isAllowed("fd12::5")).toBe(true);
    expect(onPremises.isAllowed("10.21.0.1")).toBe(false);
    expect(onPremises.isAllowed("127.0.0.1")).toBe(false);
    const development = createAddressPolicy({ allowedNetworks: [], allowLoopback: true });
    expect(development.isAllowed("127.0.0.1")).toBe(true);
    expect(development.isAllowed("::1")).toBe(true);
    expect(development.isAllowed("192.168.1.1")).toBe(false);
  });
});

test("parseNetwork reads CIDR networks and single addresses, and nothing else", () => {
  expect(parseNetwork("10.0.0.0/8")).toEqual({ address: "10.0.0.0", prefix: 8, family: "ipv4" });
  expect(parseNetwork("fd00::1")).toEqual({ address: "fd00::1", prefix: 128, family: "ipv6" });
  expect(parseNetwork("10.0.0.0/33")).toBeNull();
  expect(parseNetwork("example.com")).toBeNull();
  expect(parseNetwork("10.0.0.0/8/1")).toBeNull();
});

test("literalAddress strips IPv6 brackets and ignores names", () => {
  expect(literalAddress("[::1]")).toBe("::1");
  expect(literalAddress("127.0.0.1")).toBe("127.0.0.1");
  expect(literalAddress("example.com")).toBeNull();
});

describe("OUTBOUND_ALLOWED_NETWORKS", () => {
  test("lists the allowed networks; WEBHOOK_ALLOWED_NETWORKS, its former name, is read when it is unset", () => {
    expect(loadConfig({ OUTBOUND_ALLOWED_NETWORKS: "10.20.0.0/16, fd12::/16" }).outboundAllowedNetworks).toEqual(["10.20.0.0/16", "fd12::/16"]);
    expect(loadConfig({ WEBHOOK_ALLOWED_NETWORKS: "10.30.0.0/16" }).outboundAllowedNetworks).toEqual(["10.30.0.0/16"]);
    expect(loadConfig({ OUTBOUND_ALLOWED_NETWORKS: "10.20.0.0/16", WEBHOOK_ALLOWED_NETWORKS: "10.30.0.0/16" }).outboundAllowedNetworks).toEqual([
      "10.20.0.0/16",
    ]);
    expect(loadConfig({}).outboundAllowedNetworks).toEqual([]);
  });

  test("a value that is not a list of networks is refused, naming the variable it came from", () => {
    expect(() => loadConfig({ OUTBOUND_ALLOWED_NETWORKS: "10.0.0.0/8,intranet" })).toThrow(
      'OUTBOUND_ALLOWED_NETWORKS: must list networks such as 10.0.0.0/8 or fd00::/8, got "intranet"',
    );
    expect(() => loadConfig({ WEBHOOK_ALLOWED_NETWORKS: "10.0.0.0/33" })).toThrow("WEBHOOK_ALLOWED_NETWORKS: must list networks");
  });
});

describe("createOutboundClient", () => {
  const seen: Array<{ path: string; authorization: string | null; host: string | null }> = [];
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch(request): Response {
      const url = new URL(request.url);
      seen.push({ path: url.pathname, authorization: request.headers.get("authorization"), host: request.headers.get("host") });
      const hops = Number(url.pathname.slice(1));
      if (url.pathname === "/elsewhere") return new Response(null, { status: 302, headers: { location: `http://other.test:${server.port}/2` } });
      return hops > 0 ? new Response(null, { status: 302, headers: { location: `/${hops - 1}` } }) : new Response("arrived");
    },
  });
  const client = createOutboundClient({
    policy: createAddressPolicy({ allowedNetworks: ["127.0.0.1/32"], allowLoopback: false }),
    resolve: async (hostname) => (hostname === "other.test" ? ["127.0.0.1"] : ["10.0.0.1"]),
  });
  const base = `http://127.0.0.1:${server.port}`;
  afterAll(() => server.stop(true));

  test("follows redirects of a GET up to maxRedirects; past it, the 3xx is the answer; a POST is never redirected", async () => {
    seen.length = 0;
    expect(await (await client.send(`${base}/2`, { maxRedirects: 2 })).text()).toBe("arrived");
    expect(seen.map((hop) => hop.path)).toEqual(["/2", "/1", "/0"]);
    expect((await client.send(`${base}/3`, { maxRedirects: 2 })).status).toBe(302);
    expect((await client.send(`${base}/1`, { method: "POST", body: "x", maxRedirects: 5 })).status).toBe(302);
  });

  test("a redirect to another origin drops the credentials and sends that origin's Host; a hop to a refused address throws OutboundRefusal", async () => {
    seen.length = 0;
    expect(await (await client.send(`${base}/elsewhere`, { headers: { authorization: "Bearer secret" }, maxRedirects: 5 })).text()).toBe("arrived");
    expect(seen[0]).toMatchObject({ path: "/elsewhere", authorization: "Bearer secret" });
    expect(seen.slice(1).every((hop) => hop.authorization === null && hop.host === `other.test:${server.port}`)).toBe(true);
    await expect(client.send("http://intranet.test/", { maxRedirects: 0 })).rejects.toThrow(
      new OutboundRefusal("address 10.0.0.1 refused: not a public address (see OUTBOUND_ALLOWED_NETWORKS)"),
    );
    await expect(client.send("file:///etc/passwd", { maxRedirects: 0 })).rejects.toBeInstanceOf(OutboundRefusal);
  });
});
