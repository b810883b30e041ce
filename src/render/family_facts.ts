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
  /** Addresses of this node (this family) that accept node ports; never loopback. */
  readonly nodePortIPs: readonly string[];
  /** This node's name, for local endpoints and node topology hints. */
  readonly nodeName: string;
  /** This node's zone, for zone topology hints (empty when unknown). */
  readonly zone: string;
}

/**
 * The facts of `family`: service CIDRs and node-port addresses of that family, the node's name
 * and zone.
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
  return {
    serviceCIDRs: ofFamily(facts.serviceCIDRs),
    nodePortIPs: nodePortIPs(config, facts, ofFamily),
    nodeName: config.hostname,
    zone: facts.node?.zone ?? "",
  };
}

/** Node addresses accepting node ports: the node's primary IPs, or local addresses in CIDRs. */
function nodePortIPs(
  config: Config,
  facts: ClusterFacts,
  ofFamily: (items: readonly string[]) => string[],
): string[] {
  const cidrs = canonicalConfigCIDRs(config.nodePortAddresses.filter((a) => a !== "primary"));
  let ips: string[];
  if (cidrs.length === 0) {
    const bind = config.bindAddress;
    const primary = facts.node?.ips ?? [];
    ips = primary.length > 0 ? [...primary] : bind && !/^(0\.0\.0\.0|::)$/.test(bind) ? [bind] : [];
  } else {
    ips = (facts.localAddresses ?? []).filter((ip) => cidrs.some((c) => cidrContains(c, ip)));
  }
  // Never on loopback: upstream refuses NodePorts on 127.0.0.1 in nftables mode.
  return [...new Set(ofFamily(ips).filter((ip) => !/^127\.|^::1$/.test(ip)))].sort();
}
