/**
 * IP address and CIDR parsing for API objects, in one place, on top of `ipaddr.js`.
 *
 * Every address the proxy takes from an object goes through {@link parseAddress} or
 * {@link parseCIDR}, which read text the way upstream's `netutils.ParseIPSloppy` /
 * `ParseCIDRSloppy` do — IPv4 parts with leading zeros as decimal (`010.96.0.1` is 10.96.0.1,
 * never octal: the API server stored such addresses before its validation became strict), and
 * an IPv4-mapped IPv6 address as the IPv4 address — and return the canonical form used
 * everywhere else.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import type { IPFamily } from "./service_port.ts";

/** A dotted-quad IPv4 address in canonical form: four parts 0-255 without leading zeros. */
const CANONICAL_IPV4 =
  /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

/** A parsed address: canonical text and family, or the reason it was refused. */
export type ParsedAddress =
  | { ok: true; address: string; family: IPFamily }
  | { ok: false; reason: string };

/** A parsed CIDR: canonical `network/prefix` text and family, or the reason it was refused. */
export type ParsedCIDR =
  | { ok: true; cidr: string; family: IPFamily; network: string; prefix: number }
  | { ok: false; reason: string };

/**
 * Parses one IP address from an API object, as upstream's `ParseIPSloppy` does.
 *
 * @example
 * ```ts
 * parseAddress("10.96.0.010"); // { ok: true, address: "10.96.0.10", family: "IPv4" }
 * parseAddress("fd00::0:1");   // { ok: true, address: "fd00::1", family: "IPv6" }
 * parseAddress("10.0.0.300");  // { ok: false, reason: "…not a valid IP address" }
 * ```
 */
export function parseAddress(text: unknown): ParsedAddress {
  if (typeof text !== "string" || text === "") {
    return { ok: false, reason: `${JSON.stringify(text ?? null)} is not an IP address` };
  }
  // Nearly every address an API object holds is already canonical IPv4: it is its own answer.
  if (CANONICAL_IPV4.test(text)) return { ok: true, address: text, family: "IPv4" };
  const invalid: ParsedAddress = { ok: false, reason: `"${text}" is not a valid IP address` };
  if (text.includes(":")) {
    if (!ipaddr.IPv6.isValid(text) || text.includes("%")) return invalid;
    const v6 = ipaddr.IPv6.parse(text);
    if (v6.isIPv4MappedAddress()) {
      return { ok: true, address: v6.toIPv4Address().toString(), family: "IPv4" };
    }
    return { ok: true, address: v6.toString(), family: "IPv6" };
  }
  const parts = text.split(".");
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,10}$/.test(p) || Number(p) > 255)) {
    return invalid;
  }
  return { ok: true, address: parts.map(Number).join("."), family: "IPv4" };
}

/**
 * Parses one CIDR (`10.0.0.0/8`, `fd00::/64`); host bits are cleared in the canonical form.
 * Surrounding whitespace is trimmed, as upstream does for `loadBalancerSourceRanges`.
 */
export function parseCIDR(text: unknown): ParsedCIDR {
  if (typeof text !== "string") {
    return { ok: false, reason: `${JSON.stringify(text ?? null)} is not a CIDR` };
  }
  const trimmed = text.trim();
  const slash = trimmed.indexOf("/");
  if (slash < 0) return { ok: false, reason: `"${trimmed}" is not a CIDR (no /prefix)` };
  const address = parseAddress(trimmed.slice(0, slash));
  if (!address.ok) return { ok: false, reason: `"${trimmed}" is not a valid CIDR` };
  const prefixText = trimmed.slice(slash + 1);
  const max = address.family === "IPv4" ? 32 : 128;
  const prefix = Number(prefixText);
  if (!/^\d{1,3}$/.test(prefixText) || prefix > max) {
    return { ok: false, reason: `"${trimmed}" has an invalid prefix length, must be 0-${max}` };
  }
  const network = networkAddress(address.address, prefix);
  return { ok: true, cidr: `${network}/${prefix}`, family: address.family, network, prefix };
}

/**
 * A configured CIDR in canonical form, read as upstream's configuration reads it (leading zeros
 * as decimal: `010.244.0.0/16` → `10.244.0.0/16`). Null when it is not a CIDR.
 */
export function canonicalConfigCIDR(text: string): string | null {
  const parsed = parseCIDR(text);
  return parsed.ok ? parsed.cidr : null;
}

/** Configured CIDRs in canonical form ({@link canonicalConfigCIDR}), dropping non-CIDRs. */
export function canonicalConfigCIDRs(cidrs: readonly string[]): string[] {
  return cidrs.flatMap((c) => {
    const canonical = canonicalConfigCIDR(c);
    return canonical === null ? [] : [canonical];
  });
}

/** True when `address` (canonical) lies inside `cidr` (canonical). */
export function cidrContains(cidr: string, address: string): boolean {
  const [net, prefix] = ipaddr.parseCIDR(cidr);
  const addr = ipaddr.parse(address);
  return addr.kind() === net.kind() && addr.match(net, prefix);
}

function networkAddress(address: string, prefix: number): string {
  const bytes = ipaddr.parse(address).toByteArray();
  for (let bit = prefix; bit < bytes.length * 8; bit++) {
    bytes[bit >> 3] &= ~(0x80 >> (bit & 7));
  }
  return ipaddr.fromByteArray(bytes).toString();
}
