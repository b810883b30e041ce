/**
 * One line of `nft monitor trace`, parsed: which packet (trace id), which table and chain, and
 * whether the line shows the packet, a rule with its verdict, or a chain's policy or end.
 *
 * Pure. Reads nft 1.0.6 and 1.1.x alike (both print `trace id ID FAMILY TABLE CHAIN …`; 1.1
 * and machines without /etc/protocols print protocols as numbers, `ip protocol 6`). A line that
 * is not a trace event (nft's own notices, a truncated line) reads as null, never throws.
 *
 * @module
 */

/** The packet's addresses and ports as a `packet:` line shows them at that hook. */
export interface PacketFields {
  readonly iif?: string;
  readonly oif?: string;
  readonly saddr?: string;
  readonly daddr?: string;
  /** `tcp`, `udp`, `sctp`, … (numbers translated), when shown. */
  readonly protocol?: string;
  readonly sport?: number;
  readonly dport?: number;
}

/** One parsed trace event. */
export type TraceEvent =
  & {
    /** The trace id: one per traced packet. */
    readonly id: string;
    /** `ip`, `ip6`, `inet`, … */
    readonly family: string;
    readonly table: string;
    readonly chain: string;
  }
  & (
    | { readonly kind: "packet"; readonly packet: PacketFields }
    | { readonly kind: "rule"; readonly rule: string; readonly verdict: string }
    | { readonly kind: "policy"; readonly verdict: string }
    | { readonly kind: "verdict"; readonly verdict: string }
  );

const HEAD = /^trace id ([0-9a-f]+) (\S+) (\S+) (\S+) (packet:|rule|policy|verdict) ?(.*)$/;

const PROTOCOL_NUMBERS: Record<string, string> = {
  "6": "tcp",
  "17": "udp",
  "132": "sctp",
  "1": "icmp",
  "58": "ipv6-icmp",
};

/**
 * Parses one line of `nft monitor trace`; null when it is not a trace event.
 *
 * @example
 * ```ts
 * parseTraceLine(
 *   "trace id 34742af9 ip kube-nftproxy services rule ip daddr . meta l4proto . th dport " +
 *     "vmap @service-ips (verdict goto lb-tcp-3)",
 * );
 * // { id: "34742af9", family: "ip", table: "kube-nftproxy", chain: "services", kind: "rule",
 * //   rule: "ip daddr . meta l4proto . th dport vmap @service-ips", verdict: "goto lb-tcp-3" }
 * ```
 */
export function parseTraceLine(line: string): TraceEvent | null {
  const m = HEAD.exec(line.trimEnd());
  if (m === null) return null;
  const [, id, family, table, chain, word, rest] = m;
  const base = { id, family, table, chain };
  switch (word) {
    case "packet:":
      return { ...base, kind: "packet", packet: parsePacket(rest) };
    case "rule": {
      const v = /^(.*) \(verdict ([^)]*)\)$/.exec(rest);
      if (v === null) return { ...base, kind: "rule", rule: rest, verdict: "continue" };
      return { ...base, kind: "rule", rule: v[1], verdict: v[2] };
    }
    case "policy":
      // 1.0.6 may follow the policy with the packet's mark (`policy accept meta mark 0x…`).
      return { ...base, kind: "policy", verdict: rest.trim().split(" ")[0] };
    default:
      return { ...base, kind: "verdict", verdict: rest.trim() };
  }
}

/** The fields of a `packet:` line that say which connection it belongs to. */
export function parsePacket(text: string): PacketFields {
  const words = text.trim().split(/\s+/);
  const fields: {
    -readonly [K in keyof PacketFields]: PacketFields[K];
  } = {};
  for (let i = 0; i + 1 < words.length; i++) {
    const [a, b, c] = [words[i], words[i + 1], words[i + 2]];
    if (a === "iif" || a === "oif") fields[a] = unquote(b);
    else if ((a === "ip" || a === "ip6") && (b === "saddr" || b === "daddr") && c) fields[b] = c;
    else if (
      (a === "ip" && b === "protocol") || (a === "ip6" && b === "nexthdr") ||
      (a === "meta" && b === "l4proto")
    ) {
      if (c) fields.protocol = PROTOCOL_NUMBERS[c] ?? c;
    } else if (
      (a === "tcp" || a === "udp" || a === "sctp") && (b === "sport" || b === "dport") && c
    ) {
      fields[b] = Number(c);
      fields.protocol ??= a;
    }
  }
  return fields;
}

function unquote(text: string): string {
  return text.replace(/^"(.*)"$/, "$1");
}
