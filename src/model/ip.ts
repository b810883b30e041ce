/**
 * IP address and CIDR validation for API objects, in one place, on top of `ipaddr.js`.
 *
 * Every address the proxy takes from an object goes through {@link parseAddress} or
 * {@link parseCIDR}, which accept only unambiguous text (no leading zeros, which `ipaddr.js`
 * would read as octal; no IPv4-mapped IPv6) and return the canonical form used everywhere else.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import type { IPFamily } from "./service_port.ts";

/** A parsed address: canonical text and family, or the reason it was refused. */
export type ParsedAddress =
  | { ok: true; address: string; family: IPFamily }
  | { ok: false; reason: string };

/** A parsed CIDR: canonical `network/prefix` text and family, or the reason it was refused. */
export type ParsedCIDR =
  | { ok: true; cidr: string; family: IPFamily; network: string; prefix: number }
  | { ok: false; reason: string };

/**
 * Parses one IP address from an API object.
 *
 * @example
 * ```ts
 * parseAddress("10.96.0.010"); // { ok: false, reason: "…leading zeros…" }
 * parseAddress("fd00::0:1");   // { ok: true, address: "fd00::1", family: "IPv6" }
 * ```
 */
export function parseAddress(text: unknown): ParsedAddress {
  if (typeof text !== "string" || text === "") {
    return { ok: false, reason: `${JSON.stringify(text ?? null)} is not an IP address` };
  }
  if (text.includes(":")) {
    if (!ipaddr.IPv6.isValid(text) || text.includes("%")) {
      return { ok: false, reason: `"${text}" is not a valid IP address` };
    }
    const v6 = ipaddr.IPv6.parse(text);
    if (v6.isIPv4MappedAddress()) {
      return { ok: false, reason: `"${text}" is an IPv4-mapped IPv6 address, use the IPv4 form` };
    }
    return { ok: true, address: v6.toString(), family: "IPv6" };
  }
  if (!ipaddr.IPv4.isValidFourPartDecimal(text)) {
    return { ok: false, reason: `"${text}" is not a valid IP address` };
  }
  if (text.split(".").some((part) => part.length > 1 && part.startsWith("0"))) {
    return { ok: false, reason: `"${text}" has leading zeros, which are ambiguous` };
  }
  // Four decimal parts without leading zeros: already the canonical form.
  return { ok: true, address: text, family: "IPv4" };
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
 * A configured CIDR in canonical form, reading IPv4 octets with leading zeros as decimal as
 * Go's sloppy parser (and so upstream's configuration) does: `010.244.0.0/16` → `10.244.0.0/16`.
 * Null when it is not a CIDR.
 */
export function canonicalConfigCIDR(text: string): string | null {
  const slash = text.indexOf("/");
  const address = slash < 0 ? text : text.slice(0, slash);
  const decimal = address.includes(":")
    ? address
    : address.split(".").map((o) => o.replace(/^0+(?=\d)/, "")).join(".");
  const parsed = parseCIDR(`${decimal}${slash < 0 ? "" : text.slice(slash)}`);
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
