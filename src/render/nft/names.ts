/**
 * Names in the nft ruleset: every fixed chain, set and map name, and the functions that derive
 * per-service and shared chain names, defined once.
 *
 * Per-service names are `<kind>-<HASH>-<namespace>/<name>/<protocol>/<port>`: the hash (of the
 * exact identity) makes them unique, the rest makes them readable, and every character outside
 * `[A-Za-z0-9_./-]` is replaced so that no object name can inject syntax into a script.
 *
 * @module
 */
import { createHash } from "node:crypto";
import {
  formatServicePortName,
  servicePortKey,
  type ServicePortName,
} from "../../model/service_port.ts";

/** Fixed chains, sets and maps of each table. */
export const NAMES = {
  /** Base chain, filter prerouting before DNAT: loadBalancerSourceRanges. */
  filterPrerouting: "filter-prerouting",
  /** Base chain, filter hook forward: rejects/drops new connections to unusable services. */
  filterForward: "filter-forward",
  /** Base chain, filter hook input: the same checks for traffic addressed to the node. */
  filterInput: "filter-input",
  /** Base chain, filter hook output, before DNAT: checks for traffic the node sends. */
  filterOutput: "filter-output",
  /** Base chain, filter hook output, after DNAT: the cluster-IP check for node traffic. */
  filterOutputPostDnat: "filter-output-post-dnat",
  /** Base chain (IPv4), filter hook prerouting, after DNAT: records ClientIP affinity. */
  filterPreroutingPostDnat: "filter-prerouting-post-dnat",
  /** Base chain, nat hook prerouting: DNAT of traffic arriving at the node. */
  natPrerouting: "nat-prerouting",
  /** Base chain, nat hook output: DNAT of traffic sent by the node. */
  natOutput: "nat-output",
  /** Base chain, nat hook postrouting: hairpin, masquerade. */
  natPostrouting: "nat-postrouting",
  /** Dispatches a packet to its service via `service-ips` and `service-nodeports`. */
  services: "services",
  /** Sets the masquerade bit of the packet mark. */
  markForMasquerade: "mark-for-masquerade",
  /** Masquerades packets carrying the masquerade bit (and clears it). */
  masquerading: "masquerading",
  /** Rejects or drops connections to service IPs that have no usable endpoint. */
  serviceEndpointsCheck: "service-endpoints-check",
  /** Rejects or drops connections to node ports that have no usable endpoint. */
  nodeportEndpointsCheck: "nodeport-endpoints-check",
  /** Rejects connections to a cluster IP on a port no service uses; drops unallocated IPs. */
  clusterIPsCheck: "cluster-ips-check",
  /** Drops traffic to load-balancer IPs from sources outside loadBalancerSourceRanges. */
  firewallCheck: "firewall-check",
  /** `reject` with the family's default ICMP error, as a verdict-map target. */
  rejectChain: "reject-chain",
  /** Set: every cluster IP of this family. */
  clusterIPs: "cluster-ips",
  /** Set: the node addresses that accept node ports (empty when every local address does). */
  nodeportIPs: "nodeport-ips",
  /** Verdict map: `daddr . l4proto . dport` → the service's target (cluster, external, LB IPs). */
  serviceIPs: "service-ips",
  /** Verdict map: `l4proto . dport` → the service's external chain, for node ports. */
  serviceNodeports: "service-nodeports",
  /** Verdict map: `daddr . l4proto . dport` → reject/drop, for services without endpoints. */
  noEndpointServices: "no-endpoint-services",
  /** Verdict map: `l4proto . dport` → reject/drop, for node ports without endpoints. */
  noEndpointNodeports: "no-endpoint-nodeports",
  /** Set: `lb-ip . l4proto . port` of services with loadBalancerSourceRanges. */
  firewallIPs: "firewall-ips",
  /** Interval set: `lb-ip . l4proto . port . source-range` that may pass the firewall. */
  firewallAllow: "firewall-allow",
  /** Set: `endpoint . endpoint` for every endpoint: matches a pod DNATed back to itself. */
  hairpinEndpoints: "hairpin-endpoints",
  /**
   * Dynamic map (IPv4): `client . service-port id` → the endpoint the client sticks to, whichever
   * entry point of the service port it used (the id travels in `meta priority`, see affinity.ts).
   */
  affinity: "affinity",
  /** Map (IPv4): `daddr . l4proto . dport` of a ClientIP service port's entry point → its id. */
  affinityIds: "affinity-ids",
  /** Map (IPv4): `l4proto . dport` of a ClientIP service port's node port → its id. */
  affinityNodeportIds: "affinity-nodeport-ids",
  /** Verdict map (IPv4): service-port id → jump to the chain recording its affinity. */
  affinityRecorders: "affinity-recorders",
} as const;

/**
 * Kinds of per-service object: `external` chains (external IPs, LB IPs, node ports) and, for
 * IPv6 ClientIP affinity only, `sticky`/`sticky-local` chains, `endpoint` chains and
 * `affinity` sets (see ruleset.ts for why IPv6 affinity cannot use the shared map).
 */
export type ServiceChainKind = "external" | "sticky" | "sticky-local" | "endpoint" | "affinity";

/** Longest readable part of a per-service chain name. */
const MAX_READABLE = 100;

/**
 * The name of a per-service chain or set of one kind for one service port (and, for endpoint
 * chains and affinity sets, one endpoint `ip:port`).
 */
export function serviceChainName(
  kind: ServiceChainKind,
  spn: ServicePortName,
  endpoint = "",
): string {
  const readableIdentity =
    `${spn.namespace}/${spn.name}/${spn.protocol.toLowerCase()}/${spn.port}` +
    (endpoint === "" ? "" : `__${endpoint}`);
  // The hash covers the exact, unambiguous identity (names may hold "/" in a file source).
  const identity = `${servicePortKey(spn)}__${endpoint}`;
  const readable = readableIdentity.replace(/[^A-Za-z0-9_./-]/g, "_").slice(0, MAX_READABLE);
  return `${kind}-${hash(`${kind}:${identity}`)}-${readable}`;
}

/** Transport protocols, as nft spells them. */
export type NftProtocol = "tcp" | "udp" | "sctp";

/** Every transport protocol, in the order rules that cover each one list them. */
export const NFT_PROTOCOLS: readonly NftProtocol[] = ["tcp", "udp", "sctp"];

/**
 * Map `daddr . l4proto . dport . index` → endpoint `addr . port`: all usable endpoints
 * (`cluster-endpoints-tcp`) or this node's (`local-endpoints-tcp`). One map per protocol: the
 * value's `typeof` must name a protocol, and nft 1.0.6 then makes every rule using the map
 * match that protocol (a `th dport` value cannot be read back from the kernel). Node ports have
 * maps of their own keyed without the address, `l4proto . dport . index`
 * (`cluster-nodeport-endpoints-tcp`): a node port answers on whatever local address a packet
 * comes to.
 */
export function endpointMapName(local: boolean, protocol: NftProtocol, nodePort = false): string {
  return ENDPOINT_MAPS[local ? 1 : 0][nodePort ? 1 : 0][protocol];
}

/**
 * Every endpoint map's name, written once: a render looks one up per entry point, and a name
 * written anew each time is a new string to allocate and hash as a map key.
 */
const ENDPOINT_MAPS = [false, true].map((local) =>
  [false, true].map((nodePort) =>
    Object.fromEntries(NFT_PROTOCOLS.map((protocol) => [
      protocol,
      `${local ? "local" : "cluster"}-${nodePort ? "nodeport-" : ""}endpoints-${protocol}`,
    ])) as Record<NftProtocol, string>
  )
);

/** How a load-balancing chain picks an endpoint. */
export interface BalancerSpec {
  /** The protocol of the service port (selects the endpoint map). */
  readonly protocol: NftProtocol;
  /** Number of endpoints to pick from. */
  readonly count: number;
  /** Pick from `local-endpoints` (this node's) instead of `cluster-endpoints`. */
  readonly local: boolean;
  /** Try the client's remembered endpoint (ClientIP affinity) first. */
  readonly sticky: boolean;
}

/**
 * Shared load-balancing chain: `lb-tcp-3` picks one of 3 endpoints of a TCP port;
 * `local-lb-…` picks among this node's; `sticky-…` tries the client's affinity first.
 */
export function balancerChainName(spec: BalancerSpec): string {
  const prefix = `${spec.sticky ? "sticky-" : ""}${spec.local ? "local-" : ""}`;
  return `${prefix}lb-${spec.protocol}-${spec.count}`;
}

/** Shared chain recording ClientIP affinity with one timeout: `affinity-<seconds>`. */
export function affinityChainName(timeoutSeconds: number): string {
  return `affinity-${timeoutSeconds}`;
}

/** A comment naming a service port (`namespace/name:port`), safe inside double quotes. */
export function serviceComment(spn: ServicePortName): string {
  return safeComment(formatServicePortName(spn));
}

/** Text made safe for an nft `comment "…"`: no quotes, no control characters, capped. */
export function safeComment(text: string): string {
  return text.replace(/[^A-Za-z0-9_./:@ -]/g, "_").slice(0, 120);
}

/** 8 characters of base32 SHA-256, like upstream's chain-name hashes. */
function hash(text: string): string {
  const digest = createHash("sha256").update(text).digest();
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let out = "";
  for (let i = 0; i < 8; i++) out += alphabet[digest[i] & 31];
  return out;
}
