import { BlockList, isIP } from "node:net";

/**
 * Where webhook requests may go. Never to loopback, link-local, private, shared (CGNAT), multicast
 * or reserved addresses, nor IPv4-mapped forms of them, unless WEBHOOK_ALLOWED_NETWORKS lists the
 * network (on-premises receivers); development mode allows loopback, for a local receiver.
 */
export interface AddressPolicy {
  isAllowed(address: string): boolean;
  /** In a network allowed explicitly (WEBHOOK_ALLOWED_NETWORKS, or loopback in development). */
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
  ["2001:db8::", 32],
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
];
const LOOPBACK: string[] = ["127.0.0.0/8", "::1/128"];

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
  const familyOf = (address: string) => (isIP(address) === 4 ? "ipv4" : "ipv6");
  return {
    isAllowed(address: string): boolean {
      if (isIP(address) === 0) return false;
      // BlockList matches IPv4-mapped IPv6 addresses (::ffff:10.0.0.1) against IPv4 subnets too.
      return allowed.check(address, familyOf(address)) || !blocked.check(address, familyOf(address));
    },
    isListed(address: string): boolean {
      return isIP(address) !== 0 && allowed.check(address, familyOf(address));
    },
  };
}

/** The host of a URL as an address, when it is one (`[::1]` → `::1`); null for a name. */
export function literalAddress(hostname: string): string | null {
  const bare = hostname.startsWith("[") && hostname.endsWith("]") ? hostname.slice(1, -1) : hostname;
  return isIP(bare) === 0 ? null : bare;
}
