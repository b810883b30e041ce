/**
 * Explains one packet: walks the nft ruleset the proxy would program for a state and says where
 * a new connection from a source address to a destination goes — which hook and chains it
 * passes, which service port and entry point match, which endpoints are eligible and how likely
 * each is, whether it is masqueraded, or which rule rejects or drops it.
 *
 * Pure: the rules come from the renderer itself (`renderServicePort` with `nftRenderOptions`),
 * so endpoint selection, topology, traffic policies and local-traffic detection are the
 * renderer's; this module only follows the rendered elements and chains the way the kernel
 * would for the packet's source. This module holds the question and the answer; the rules are
 * indexed in rule_index.ts and walked in walk.ts.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import type { Endpoint } from "../model/endpoint.ts";
import { parseAddress } from "../model/ip.ts";
import type { NodeInfo } from "../model/node.ts";
import { familyOf, type ServicePort } from "../model/service_port.ts";
import { nftRenderOptions } from "../render/nft/options.ts";
import { nftFamilyOf } from "../render/nft/transaction.ts";
import { buildIndex } from "./rule_index.ts";
import { Walk } from "./walk.ts";

/** What an explanation is computed from: the proxy's state and configuration. */
export interface ExplainInput {
  readonly config: Config;
  /** Service ports by service port key. */
  readonly services: ReadonlyMap<string, ServicePort>;
  /** Endpoints by service port key. */
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
  readonly node: NodeInfo | null;
  readonly serviceCIDRs: readonly string[];
  /** This node's interface addresses, when known (CIDR `nodePortAddresses`; node sources). */
  readonly localAddresses?: readonly string[];
}

/** Where a packet is sent: address, port and transport protocol. */
export interface Target {
  /** Canonical address. */
  readonly address: string;
  readonly port: number;
  readonly protocol: "tcp" | "udp" | "sctp";
}

/** The packet to explain: the first packet of a new connection. */
export interface PacketQuery {
  /** Source address. */
  readonly from: string;
  readonly to: Target;
}

/** What happens to the connection. */
export type Verdict = "dnat" | "reject" | "drop" | "no-match";

/** One eligible endpoint and the chance a new connection picks it. */
export interface ExplainedEndpoint {
  readonly ip: string;
  readonly port: number;
  /** 1/N for each of N endpoints (before ClientIP affinity). */
  readonly probability: number;
}

/** The explanation of one packet. */
export interface Explanation {
  readonly verdict: Verdict;
  /** `namespace/name:port` of the matched service port, or null. */
  readonly servicePort: string | null;
  /** The entry point that matched (e.g. `cluster IP 10.96.0.10:80/tcp`), or null. */
  readonly entry: string | null;
  /** Hooks, chains and maps the packet passes, in order. */
  readonly path: readonly string[];
  /** Eligible endpoints (empty unless the verdict is `dnat`). */
  readonly endpoints: readonly ExplainedEndpoint[];
  /** The source address is replaced by the node's (always, not only on a hairpin). */
  readonly masquerade: boolean;
  /** Why: the deciding rules and elements, one sentence each. */
  readonly reason: string;
  /** How the rules see the source: a local pod, the node itself, or off-cluster. */
  readonly source: "pod" | "node" | "off-cluster";
  /** ClientIP affinity: a returning client keeps its endpoint. */
  readonly sticky: boolean;
  /** The destination is one of this node's addresses (unmatched traffic reaches its stack). */
  readonly toNode: boolean;
}

/**
 * Explains what the rules rendered from `input` do with the first packet of `query`.
 * Throws when the source and destination are of different families.
 *
 * @example
 * ```ts
 * const e = explainPacket(input, {
 *   from: "192.168.77.2",
 *   to: { address: "10.96.0.10", port: 80, protocol: "tcp" },
 * });
 * e.verdict; // "dnat"
 * ```
 */
export function explainPacket(input: ExplainInput, query: PacketQuery): Explanation {
  const { from, to } = query;
  if (familyOf(from) !== familyOf(to.address)) {
    throw new Error(`source ${from} and destination ${to.address} are of different IP families`);
  }
  const options = nftRenderOptions(input.config, {
    node: input.node,
    serviceCIDRs: input.serviceCIDRs,
    localAddresses: input.localAddresses,
  }, nftFamilyOf(familyOf(to.address)));
  return new Walk(input, options, buildIndex(input, options), query).run();
}

/**
 * Parses a target like `10.96.0.10:80/tcp`, `[fd00::10]:80/udp` or `10.96.0.10:80` (TCP).
 * Throws an Error naming the problem.
 */
export function parseTarget(text: string): Target {
  const m = /^(?:\[([^\]]+)\]|([^:/\[\]]+)):(\d+)(?:\/(tcp|udp|sctp))?$/i.exec(text.trim());
  if (m === null) throw new Error(`--to ${text}: want ADDRESS:PORT[/tcp|udp|sctp]`);
  const port = Number(m[3]);
  if (port < 1 || port > 65535) throw new Error(`--to ${text}: port out of range`);
  return {
    address: canonicalAddress(m[1] ?? m[2], "--to"),
    port,
    protocol: (m[4]?.toLowerCase() ?? "tcp") as Target["protocol"],
  };
}

/** The canonical text of an address; throws naming `what` when it is not one. */
export function canonicalAddress(text: string, what: string): string {
  const parsed = parseAddress(text);
  if (!parsed.ok) throw new Error(`${what} ${text}: not an IP address`);
  return parsed.address;
}
