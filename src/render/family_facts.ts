/**
 * The facts of one IP family that both renderers turn into rules alike: the service CIDRs whose
 * unallocated addresses are dropped, the node addresses that accept node ports, and the node's
 * name and zone (local endpoints, topology hints). Derived here once, so the nft and iptables
 * back ends serve node ports on exactly the same addresses.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import { canonicalConfigCIDRs, cidrContains } from "../model/ip.ts";
import { familyOf, type IPFamily } from "../model/service_port.ts";
import type { ClusterFacts } from "./planner.ts";

/** One family's share of the cluster facts, as the renderers use it. */
export interface FamilyFacts {
  /** Service CIDRs of this family: unallocated IPs inside them are dropped. */
  readonly serviceCIDRs: readonly string[];
  /**
   * Node ports are served on every local address of this family, whatever it is when a packet
   * comes (nft `fib daddr type local`, iptables `--dst-type LOCAL`), loopback excepted;
   * {@link nodePortIPs} is then empty.
   */
  readonly nodePortsOnAllAddresses: boolean;
  /** Otherwise, the addresses of this node (this family) that accept node ports; never loopback. */
  readonly nodePortIPs: readonly string[];
  /**
   * The node's primary IPs of this family (its Node's addresses, else `bindAddress`): a
   * `loadBalancerSourceRanges` range holding one lets the node's own traffic from an LB IP in.
   */
  readonly nodeIPs: readonly string[];
  /** This node's name, for local endpoints and node topology hints. */
  readonly nodeName: string;
  /** This node's zone, for zone topology hints (empty when unknown). */
  readonly zone: string;
}

/**
 * The facts of `family`: service CIDRs and node-port addresses of that family, the node's name
 * and zone.
 *
 * Node ports follow upstream's `nodePortAddresses` (`NodePortAddresses` in `pkg/proxy/util`, the
 * `primary` keyword in `cmd/kube-proxy/app/server.go`): empty means `primary` in nft mode (as
 * kube-proxy's nftables mode) and every local address in iptables mode (as its iptables
 * mode); `primary` means the node's primary IP of the family, or every local address while
 * that is unknown; a CIDR list means the local addresses inside its CIDRs of the family, or
 * every local address when it has none of the family or a `0.0.0.0/0` / `::/0`.
 *
 * @example
 * ```ts
 * familyFacts(config, { node, serviceCIDRs: ["10.96.0.0/16"] }, "IPv4").nodePortIPs;
 * // ["192.168.77.1"] — the Node's primary IPv4 address
 * ```
 */
export function familyFacts(config: Config, facts: ClusterFacts, family: IPFamily): FamilyFacts {
  const ofFamily = (items: readonly string[]) =>
    items.filter((c) => familyOf(c.split("/")[0]) === family);
  const nodeIPs = ofFamily(primaryIPs(config, facts));
  const nodePorts = nodePortAddresses(config, facts, nodeIPs, ofFamily);
  return {
    serviceCIDRs: ofFamily(facts.serviceCIDRs),
    nodePortsOnAllAddresses: nodePorts === "all",
    nodePortIPs: nodePorts === "all" ? [] : nodePorts,
    nodeIPs,
    nodeName: config.hostname,
    zone: facts.node?.zone ?? "",
  };
}

/** The node's primary IPs: its Node's addresses, else a specific `bindAddress`. */
function primaryIPs(config: Config, facts: ClusterFacts): string[] {
  const primary = facts.node?.ips ?? [];
  if (primary.length > 0) return [...primary];
  const bind = config.bindAddress;
  return bind && !/^(0\.0\.0\.0|::)$/.test(bind) ? [bind] : [];
}

/** Node addresses accepting node ports in `family`, or "all" of them. */
function nodePortAddresses(
  config: Config,
  facts: ClusterFacts,
  nodeIPs: readonly string[],
  ofFamily: (items: readonly string[]) => string[],
): string[] | "all" {
  const configured = config.nodePortAddresses;
  const primary = configured.length === 1 && configured[0] === "primary" ||
    configured.length === 0 && config.mode === "nft";
  let ips: string[];
  if (primary) {
    ips = nodeIPs.filter((ip) => !isLoopback(ip));
    // Upstream: no primary IP of the family, no CIDR of the family, so every local address.
    if (ips.length === 0) return "all";
  } else {
    const cidrs = ofFamily(canonicalConfigCIDRs(configured.filter((a) => a !== "primary")));
    if (cidrs.length === 0 || cidrs.some((c) => c.endsWith("/0"))) return "all";
    ips = (facts.localAddresses ?? []).filter((ip) => cidrs.some((c) => cidrContains(c, ip)));
  }
  // Never on loopback: upstream refuses NodePorts on 127.0.0.1 in nftables mode.
  return [...new Set(ofFamily(ips).filter((ip) => !isLoopback(ip)))].sort();
}

function isLoopback(ip: string): boolean {
  return /^127\.|^::1$/.test(ip);
}
