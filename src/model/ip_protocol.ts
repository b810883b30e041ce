/**
 * IP protocol numbers and their names (IANA's numbers, the names `/etc/protocols` gives them).
 *
 * Our scripts write protocols by name (`tcp`, `udp`, `sctp`); `nft` prints them back by name
 * only when it can read `/etc/protocols` (package netbase), and as numbers otherwise — in set
 * elements, rules and JSON alike, whatever its release (Debian 13's minimal root has no such
 * file). Whatever reads the kernel back turns a protocol value into one spelling with
 * {@link protocolName}.
 *
 * @module
 */

/** Protocols by number, named as in `/etc/protocols`. */
const NAMES: ReadonlyMap<number, string> = new Map([
  [1, "icmp"],
  [2, "igmp"],
  [6, "tcp"],
  [17, "udp"],
  [33, "dccp"],
  [47, "gre"],
  [50, "esp"],
  [51, "ah"],
  [58, "ipv6-icmp"],
  [132, "sctp"],
  [136, "udplite"],
]);

/**
 * The name of an IP protocol value as nft may print it (`6`, `"6"` or `"tcp"`): the name for a
 * known number, anything else as given (as text).
 *
 * @example
 * ```ts
 * protocolName("6");   // "tcp"
 * protocolName(132);   // "sctp"
 * protocolName("udp"); // "udp"
 * protocolName(253);   // "253"
 * ```
 */
export function protocolName(value: string | number): string {
  const text = String(value);
  return /^\d+$/.test(text) ? NAMES.get(Number(text)) ?? text : text;
}
