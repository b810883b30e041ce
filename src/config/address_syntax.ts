/**
 * Addresses as kube-proxy's configuration reads them: Go's `net.ParseIP`/`ParseCIDR` in their
 * "sloppy" form (IPv4 octets may carry leading zeros, IPv6 zones are refused), with ipaddr.js
 * doing the IPv6 parsing, and `host:port` as `net.SplitHostPort` splits it. The checks that use
 * them live in validation.ts.
 *
 * @module
 */
import ipaddr from "ipaddr.js";

/** An IP family: 4 or 6. */
export type IPFamily = 4 | 6;

const IPV4 = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/;

/**
 * The family of `text` as Go's sloppy IP parser reads it, or `undefined` if it is not an IP.
 * IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) count as IPv4, as in Go.
 *
 * @example
 * ```ts
 * ipFamily("10.0.0.1"); // 4
 * ipFamily("fd00::1"); // 6
 * ipFamily("fe80::1%eth0"); // undefined
 * ```
 */
export function ipFamily(text: string): IPFamily | undefined {
  const v4 = IPV4.exec(text);
  if (v4) return v4.slice(1).every((octet) => Number(octet) <= 255) ? 4 : undefined;
  if (text.includes("%") || !ipaddr.IPv6.isValid(text)) return undefined;
  return ipaddr.IPv6.parse(text).isIPv4MappedAddress() ? 4 : 6;
}

/**
 * The family of the CIDR `text` (`address/prefix`), or `undefined` if it is not a CIDR. Host
 * bits may be set (`10.0.0.1/8`), as Go's `ParseCIDR` allows.
 *
 * @example
 * ```ts
 * cidrFamily("10.244.0.0/16"); // 4
 * cidrFamily("fd00:10:244::/56"); // 6
 * cidrFamily("10.244.0.0"); // undefined
 * ```
 */
export function cidrFamily(text: string): IPFamily | undefined {
  const slash = text.lastIndexOf("/");
  if (slash === -1) return undefined;
  const address = text.slice(0, slash);
  const prefix = text.slice(slash + 1);
  const family = ipFamily(address);
  if (family === undefined || !/^\d+$/.test(prefix)) return undefined;
  const bits = IPV4.test(address) ? 32 : 128;
  return Number(prefix) <= bits ? family : undefined;
}

/**
 * Splits `host:port` or `[ipv6]:port` like Go's `net.SplitHostPort`; `undefined` when `text`
 * has no port or is malformed.
 *
 * @example
 * ```ts
 * splitHostPort("[::]:10256"); // { host: "::", port: "10256" }
 * splitHostPort("0.0.0.0"); // undefined
 * ```
 */
export function splitHostPort(text: string): { host: string; port: string } | undefined {
  if (text.startsWith("[")) {
    const match = /^\[([^\[\]]*)\]:([^:\[\]]*)$/.exec(text);
    return match ? { host: match[1], port: match[2] } : undefined;
  }
  const colon = text.lastIndexOf(":");
  if (colon === -1) return undefined;
  const host = text.slice(0, colon);
  if (host.includes(":") || host.includes("[") || host.includes("]")) return undefined;
  return { host, port: text.slice(colon + 1) };
}

/**
 * Appends `:port` to a bare IP (`[ip]:port` for IPv6), as kube-proxy's `AppendPortIfNeeded`
 * does for `healthzBindAddress` and `metricsBindAddress`; anything else is returned unchanged
 * for validation to judge.
 *
 * @example
 * ```ts
 * appendPortIfNeeded("0.0.0.0", 10256); // "0.0.0.0:10256"
 * appendPortIfNeeded("::1", 10249); // "[::1]:10249"
 * appendPortIfNeeded("127.0.0.1:9000", 10249); // "127.0.0.1:9000"
 * ```
 */
export function appendPortIfNeeded(address: string, port: number): string {
  if (splitHostPort(address) !== undefined) return address;
  const family = ipFamily(address);
  if (family === undefined) return address;
  return IPV4.test(address) ? `${address}:${port}` : `[${address}]:${port}`;
}

/**
 * Whether an IP is the unspecified address (`0.0.0.0`, `::`), which as `bindAddress` means
 * "take the node IPs from the Node object".
 */
export function isUnspecifiedIP(text: string): boolean {
  const family = ipFamily(text);
  if (family === undefined) return false;
  const v4 = IPV4.exec(text);
  if (v4) return v4.slice(1).every((octet) => Number(octet) === 0);
  return ipaddr.IPv6.parse(text).range() === "unspecified";
}
