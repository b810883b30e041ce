/**
 * Names in the iptables layout: every fixed KUBE-* chain, the per-service chain names hashed
 * exactly like upstream kube-proxy's, and the comment quoting, defined once.
 *
 * Per-service chains are `KUBE-<KIND>-` + the first 16 characters of base32(sha256(text)), where
 * text is the service-port name (`namespace/name:port`) + the lower-case protocol (+ the
 * endpoint `ip:port` for `KUBE-SEP-`), as upstream's `portProtoHash` and
 * `servicePortEndpointChainName`; the same Service gets the same chain names under both
 * proxies, and names stay within iptables' 28-character limit whatever the object names are.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { formatServicePortName, type ServicePortName } from "../../model/service_port.ts";

/** The fixed chains of the `nat` table. */
export const NAT = {
  /** Dispatch: one rule per cluster, external and load-balancer IP, then node ports. */
  services: "KUBE-SERVICES",
  /** Node ports (entered from the tail of KUBE-SERVICES for the node-port addresses). */
  nodePorts: "KUBE-NODEPORTS",
  /** Masquerades packets carrying the masquerade mark (hooked into POSTROUTING). */
  postrouting: "KUBE-POSTROUTING",
  /** Sets the masquerade bit of the packet mark. */
  markMasq: "KUBE-MARK-MASQ",
} as const;

/** The fixed chains of the `filter` table. */
export const FILTER = {
  /** Rejects/drops new connections to cluster IPs without (local) endpoints. */
  services: "KUBE-SERVICES",
  /** Rejects/drops new connections to external IPs, LB IPs and node ports without endpoints. */
  externalServices: "KUBE-EXTERNAL-SERVICES",
  /** Accepts masqueraded and established forwarded traffic; drops conntrack-invalid packets. */
  forward: "KUBE-FORWARD",
  /** Accepts health-check node ports. */
  nodePorts: "KUBE-NODEPORTS",
  /** Drops traffic to LB IPs that KUBE-FW-* did not let through (loadBalancerSourceRanges). */
  proxyFirewall: "KUBE-PROXY-FIREWALL",
  /**
   * Ours (no upstream equivalent): rejects a cluster IP on a port no service uses and drops
   * unallocated IPs of the service CIDRs, as the nft backend's `cluster-ips-check`.
   */
  clusterIPs: "KUBE-CLUSTER-IPS",
} as const;

/** The two tables the proxy writes rules to. */
export type Table = "filter" | "nat";

/**
 * An empty chain in the mangle, nat and filter tables of each family, as upstream kube-proxy's
 * `KUBE-PROXY-CANARY`: it holds no rule and nothing jumps to it, so it is gone only when
 * someone else deleted our chains (`iptables -X`, a firewall reload). The rules watcher
 * (`src/apply/iptables_watch.ts`) looks for it to notice that our rules need restoring.
 */
export const CANARY = "KUBE-PROXY-CANARY";

/** The tables holding a {@link CANARY}: mangle first, the small table upstream watches. */
export const CANARY_TABLES = ["mangle", "nat", "filter"] as const;

/** Every fixed chain, per table, in the order a script declares them. */
export const FIXED_CHAINS: Readonly<Record<Table, readonly string[]>> = {
  filter: [
    FILTER.services,
    FILTER.externalServices,
    FILTER.forward,
    FILTER.nodePorts,
    FILTER.proxyFirewall,
    FILTER.clusterIPs,
    CANARY,
  ],
  nat: [NAT.services, NAT.nodePorts, NAT.postrouting, NAT.markMasq, CANARY],
};

/** Prefixes of the per-service chains (all in `nat`). */
export const SERVICE_CHAIN_PREFIXES = [
  "KUBE-SVC-",
  "KUBE-SVL-",
  "KUBE-EXT-",
  "KUBE-FW-",
  "KUBE-SEP-",
] as const;

/** True for a per-service chain name (`KUBE-SVC-…`, `KUBE-SEP-…`, …), like upstream's test. */
export function isServiceChainName(name: string): boolean {
  return SERVICE_CHAIN_PREFIXES.some((p) => name.startsWith(p));
}

/** The per-service chains of one service port. */
export interface ServiceChainNames {
  /** `KUBE-SVC-…`: balances over all usable endpoints (Cluster traffic policy). */
  readonly cluster: string;
  /** `KUBE-SVL-…`: balances over this node's endpoints (Local traffic policy). */
  readonly local: string;
  /** `KUBE-EXT-…`: external IPs, LB IPs and node ports (masquerade, eTP Local short-circuit). */
  readonly external: string;
  /** `KUBE-FW-…`: loadBalancerSourceRanges. */
  readonly firewall: string;
}

/** The per-service chain names of a service port. */
export function serviceChainNames(spn: ServicePortName): ServiceChainNames {
  const hash = hash16(formatServicePortName(spn) + spn.protocol.toLowerCase());
  return {
    cluster: `KUBE-SVC-${hash}`,
    local: `KUBE-SVL-${hash}`,
    external: `KUBE-EXT-${hash}`,
    firewall: `KUBE-FW-${hash}`,
  };
}

/** `KUBE-SEP-…`: the chain of one endpoint (`ip:port`, IPv6 in brackets) of a service port. */
export function endpointChainName(spn: ServicePortName, endpoint: string): string {
  return `KUBE-SEP-${hash16(formatServicePortName(spn) + spn.protocol.toLowerCase() + endpoint)}`;
}

/**
 * A `-m comment --comment "…"` argument: the text quoted for iptables-restore, with every
 * character that could end the quote or the line replaced, and capped at iptables' 256 bytes.
 */
export function comment(text: string): string {
  return `-m comment --comment "${text.replace(/[^A-Za-z0-9_./:@ ;>,[\]-]/g, "_").slice(0, 255)}"`;
}

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** The first 16 characters of base32(sha256(text)), as upstream's chain-name hashes. */
function hash16(text: string): string {
  const digest = createHash("sha256").update(text).digest();
  let out = "";
  // 16 base32 characters are 80 bits: two groups of 5 bytes (40 bits, exact in a double).
  for (let group = 0; group < 2; group++) {
    let bits = 0;
    for (let i = 0; i < 5; i++) bits = bits * 256 + digest[group * 5 + i];
    for (let c = 7; c >= 0; c--) out += BASE32[Math.floor(bits / 2 ** (c * 5)) % 32];
  }
  return out;
}
