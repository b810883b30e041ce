/**
 * Names in the nft ruleset: every fixed chain, set and map name, and the one function that
 * derives per-service chain names, defined once.
 *
 * Per-service names are `<kind>-<HASH>-<namespace>/<name>/<protocol>/<port>`: the hash (of the
 * exact identity) makes them unique, the rest makes them readable, and every character outside
 * `[A-Za-z0-9_./-]` is replaced so that no object name can inject syntax into a script.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { formatServicePortName, type ServicePortName } from "../../model/service_port.ts";

/** Fixed chains, sets and maps of each table. */
export const NAMES = {
  /** Base chain, filter hook forward: rejects/drops new connections to unusable services. */
  filterForward: "filter-forward",
  /** Base chain, filter hook input: the same checks for traffic addressed to the node. */
  filterInput: "filter-input",
  /** Base chain, filter hook output, before DNAT: checks for traffic the node sends. */
  filterOutput: "filter-output",
  /** Base chain, filter hook output, after DNAT: the cluster-IP check for node traffic. */
  filterOutputPostDnat: "filter-output-post-dnat",
  /** Base chain, nat hook prerouting: DNAT of traffic arriving at the node. */
  natPrerouting: "nat-prerouting",
  /** Base chain, nat hook output: DNAT of traffic sent by the node. */
  natOutput: "nat-output",
  /** Base chain, nat hook postrouting: masquerade of marked traffic. */
  natPostrouting: "nat-postrouting",
  /** Dispatches a packet to its service chain via `service-ips`. */
  services: "services",
  /** Sets the masquerade bit of the packet mark. */
  markForMasquerade: "mark-for-masquerade",
  /** Masquerades packets carrying the masquerade bit (and clears it). */
  masquerading: "masquerading",
  /** Rejects or drops connections to services that have no usable endpoint. */
  serviceEndpointsCheck: "service-endpoints-check",
  /** Rejects connections to a cluster IP on a port no service uses; drops unallocated IPs. */
  clusterIPsCheck: "cluster-ips-check",
  /** `reject` with the family's default ICMP error, as a verdict-map target. */
  rejectChain: "reject-chain",
  /** Set: every cluster IP of this family. */
  clusterIPs: "cluster-ips",
  /** Verdict map: `daddr . l4proto . dport` → goto the service chain. */
  serviceIPs: "service-ips",
  /** Verdict map: `daddr . l4proto . dport` → reject/drop, for services without endpoints. */
  noEndpointServices: "no-endpoint-services",
  /** Set: `endpoint . endpoint` for every endpoint: matches a pod DNATed back to itself. */
  hairpinEndpoints: "hairpin-endpoints",
  /** Map: `daddr . l4proto . dport . index` → endpoint `addr . port` (cluster traffic). */
  serviceEndpoints: "service-endpoints",
} as const;

/** Kinds of per-service chain. */
export type ServiceChainKind = "service" | "external";

/** Longest readable part of a per-service chain name. */
const MAX_READABLE = 100;

/** The per-service chain name of one kind for one service port. */
export function serviceChainName(kind: ServiceChainKind, spn: ServicePortName): string {
  const identity = `${spn.namespace}/${spn.name}/${spn.protocol.toLowerCase()}/${spn.port}`;
  const readable = identity.replace(/[^A-Za-z0-9_./-]/g, "_").slice(0, MAX_READABLE);
  return `${kind}-${hash(`${kind}:${identity}`)}-${readable}`;
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
