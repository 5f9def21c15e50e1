import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";

/**
 * The one policy for every HTTP request the server makes on its own (feed pulls, webhook
 * deliveries): the host is resolved, every address it resolves to is checked, and the connection
 * goes to the checked address (with the original Host header and TLS server name), so a name cannot
 * resolve to another address between the check and the connection. Redirects are followed only
 * when the caller asks, each hop through the same check.
 *
 * Refused: loopback, private, link-local, shared (CGNAT), multicast, unspecified, reserved and
 * documentation addresses, and the IPv6 forms that translate to IPv4 addresses (IPv4-mapped,
 * IPv4-compatible, NAT64, 6to4, Teredo, the 6to4 relay anycast), unless OUTBOUND_ALLOWED_NETWORKS
 * lists the network; development mode allows loopback.
 */
export interface AddressPolicy {
  isAllowed(address: string): boolean;
  /** In a network allowed explicitly (OUTBOUND_ALLOWED_NETWORKS, or loopback in development). */
  isListed(address: string): boolean;
}

const BLOCKED_IPV4: Array<[string, number]> = [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24], // 6to4 relay anycast
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
];
const BLOCKED_IPV6: Array<[string, number]> = [
  ["::", 96], // :: and ::1, and the deprecated IPv4-compatible ::a.b.c.d
  ["64:ff9b::", 96], // NAT64 of any IPv4 address, private ones included
  ["64:ff9b:1::", 48], // local-use NAT64 (RFC 8215), likewise
  ["100::", 64],
  ["2001::", 32], // Teredo
  ["2001:db8::", 32],
  ["2002::", 16], // 6to4
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
];
const LOOPBACK: string[] = ["127.0.0.0/8", "::1/128"];

/** The IPv4-mapped range ::ffff:0:0/96 on its own: BlockList would match every plain IPv4 address against it too. */
const IPV4_MAPPED = new BlockList();
IPV4_MAPPED.addSubnet("::ffff:0:0", 96, "ipv6");

const familyOf = (address: string) => (isIP(address) === 4 ? "ipv4" : "ipv6");

/** A network in CIDR form (`10.1.0.0/16`, `fd00::/8`) or one address; null when it is neither. */
export function parseNetwork(text: string): { address: string; prefix: number; family: "ipv4" | "ipv6" } | null {
  const [address = "", prefixText, ...rest] = text.trim().split("/");
  const version = isIP(address);
  if (version === 0 || rest.length > 0) return null;
  const family = version === 4 ? "ipv4" : "ipv6";
  const max = version === 4 ? 32 : 128;
  const prefix = prefixText === undefined ? max : /^\d{1,3}$/.test(prefixText) ? Number(prefixText) : -1;
  return prefix >= 0 && prefix <= max ? { address, prefix, family } : null;
}

export function createAddressPolicy(input: { allowedNetworks: string[]; allowLoopback: boolean }): AddressPolicy {
  const blocked = new BlockList();
  for (const [address, prefix] of BLOCKED_IPV4) blocked.addSubnet(address, prefix, "ipv4");
  for (const [address, prefix] of BLOCKED_IPV6) blocked.addSubnet(address, prefix, "ipv6");
  const allowed = new BlockList();
  for (const network of [...input.allowedNetworks, ...(input.allowLoopback ? LOOPBACK : [])]) {
    const parsed = parseNetwork(network);
    if (parsed !== null) allowed.addSubnet(parsed.address, parsed.prefix, parsed.family);
  }
  const isListed = (address: string) => isIP(address) !== 0 && allowed.check(address, familyOf(address));
  const isBlocked = (address: string) => blocked.check(address, familyOf(address)) || (isIP(address) === 6 && IPV4_MAPPED.check(address, "ipv6"));
  return {
    // An allowed network also allows the IPv4-mapped forms of its addresses (BlockList matches them).
    isAllowed: (address) => isIP(address) !== 0 && (isListed(address) || !isBlocked(address)),
    isListed,
  };
}

/** The host of a URL as an address, when it is one (`[::1]` → `::1`); null for a name. */
export function literalAddress(hostname: string): string | null {
  const bare = hostname.startsWith("[") && hostname.endsWith("]") ? hostname.slice(1, -1) : hostname;
  return isIP(bare) === 0 ? null : bare;
}

export type ResolveHost = (hostname: string) => Promise<string[]>;

const resolveWithDNS: ResolveHost = async (hostname) => (await lookup(hostname, { all: true, verbatim: true })).map((entry) => entry.address);

/** A request the policy did not let out: no connection was made. */
export class OutboundRefusal extends Error {
  override name = "OutboundRefusal";
}

export interface OutboundRequest extends Omit<RequestInit, "redirect"> {
  /** Redirects to follow (GET and HEAD only), each to an address the policy allows; 0: a 3xx is the answer. */
  maxRedirects: number;
}

/** Sends requests under the policy; `send` has fetch's shape, and throws OutboundRefusal for a refused hop. */
export interface OutboundClient {
  send(url: string | URL, init: OutboundRequest): Promise<Response>;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Request headers that never go to another origin than the one they were meant for. */
const ORIGIN_BOUND_HEADERS = ["authorization", "cookie", "proxy-authorization"];

/** `work`, or the signal's reason once it aborts: the request's time-out covers resolving its host too. */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | null | undefined): Promise<T> {
  if (!signal) return work;
  signal.throwIfAborted();
  const aborted = new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
  return Promise.race([work, aborted]);
}

export function createOutboundClient(input: { policy: AddressPolicy; resolve?: ResolveHost; fetch?: typeof fetch }): OutboundClient {
  const resolve = input.resolve ?? resolveWithDNS;
  const send = input.fetch ?? fetch;

  /** The address to connect to for `url`: every address its host resolves to must be allowed. */
  async function checkedAddress(url: URL, signal: AbortSignal | null | undefined): Promise<string> {
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new OutboundRefusal(`${url.protocol} URLs are not fetched`);
    const literal = literalAddress(url.hostname);
    const addresses =
      literal !== null
        ? [literal]
        : await untilAborted(
            resolve(url.hostname).catch(() => []),
            signal,
          );
    if (addresses.length === 0) throw new OutboundRefusal(`host name ${url.hostname} not resolved`);
    const refused = addresses.find((address) => !input.policy.isAllowed(address));
    if (refused !== undefined) throw new OutboundRefusal(`address ${refused} refused: not a public address (see OUTBOUND_ALLOWED_NETWORKS)`);
    return addresses[0]!;
  }

  /** One hop, connected to the checked address: the Host header and TLS server name stay the URL's. */
  async function hop(url: URL, init: RequestInit): Promise<Response> {
    const address = await checkedAddress(url, init.signal);
    const pinned = new URL(url);
    pinned.hostname = isIP(address) === 6 ? `[${address}]` : address;
    const headers = new Headers(init.headers);
    headers.set("host", url.host);
    const tls = url.protocol === "https:" && literalAddress(url.hostname) === null ? { serverName: url.hostname } : undefined;
    return send(pinned, { ...init, headers, redirect: "manual", tls } as RequestInit);
  }

  return {
    async send(target, { maxRedirects, ...init }) {
      let url = new URL(target);
      let headers = new Headers(init.headers);
      const method = (init.method ?? "GET").toUpperCase();
      const followable = method === "GET" || method === "HEAD";
      for (let redirects = 0; ; redirects++) {
        const response = await hop(url, { ...init, headers });
        const location = response.headers.get("location");
        if (!REDIRECT_STATUSES.has(response.status) || location === null || !followable || redirects >= maxRedirects) return response;
        await response.body?.cancel().catch(() => undefined);
        const next = new URL(location, url);
        if (next.origin !== url.origin) {
          headers = new Headers(headers);
          for (const name of ORIGIN_BOUND_HEADERS) headers.delete(name);
        }
        url = next;
      }
    },
  };
}
