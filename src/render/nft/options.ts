/**
 * Render options for one nft family, derived from the configuration and the node: the one place
 * where `detectLocalMode`, `masqueradeAll`, `nodePortAddresses` and the service CIDRs become
 * rule text or addresses.
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import { canonicalConfigCIDRs, cidrContains } from "../../model/ip.ts";
import type { NodeInfo } from "../../model/node.ts";
import { familyOf } from "../../model/service_port.ts";
import { ipFamilyOf, type NftRenderOptions } from "./ruleset.ts";
import type { NftFamily } from "./transaction.ts";

/** What the options depend on besides the configuration. */
export interface ClusterFacts {
  readonly node: NodeInfo | null;
  readonly serviceCIDRs: readonly string[];
  /** Addresses on this node's interfaces (for CIDR `nodePortAddresses`); empty if unknown. */
  readonly localAddresses?: readonly string[];
}

/** The render options of one family. */
export function nftRenderOptions(
  config: Config,
  facts: ClusterFacts,
  family: NftFamily,
): NftRenderOptions {
  const ipFamily = ipFamilyOf(family);
  const ofFamily = (items: readonly string[]) =>
    items.filter((c) => familyOf(c.split("/")[0]) === ipFamily);
  const detector = localDetector(config, facts.node, family, ofFamily);
  return {
    table: config.tableName,
    family,
    masqueradeBit: config.masqueradeBit,
    masqueradeAll: config.masqueradeAll,
    localMatch: detector?.local ?? null,
    notLocalMatch: detector?.notLocal ?? null,
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

function localDetector(
  config: Config,
  node: NodeInfo | null,
  family: NftFamily,
  ofFamily: (cidrs: readonly string[]) => string[],
): { local: string; notLocal: string } | null {
  // One CIDR per family (upstream allows no more); never an inline set in a rule.
  const byCIDR = (cidrs: string[]) =>
    cidrs.length === 0
      ? null
      : { local: `${family} saddr ${cidrs[0]}`, notLocal: `${family} saddr != ${cidrs[0]}` };
  const byInterface = (name: string) =>
    name === "" ? null : { local: `iifname "${name}"`, notLocal: `iifname != "${name}"` };
  switch (config.detectLocalMode) {
    case "ClusterCIDR":
      return byCIDR(ofFamily(canonicalConfigCIDRs(config.clusterCIDRs)));
    case "NodeCIDR":
      return byCIDR(ofFamily(node?.podCIDRs ?? []));
    case "BridgeInterface":
      return byInterface(config.bridgeInterface);
    case "InterfaceNamePrefix":
      return config.interfaceNamePrefix === ""
        ? null
        : byInterface(`${config.interfaceNamePrefix}*`);
    case "None":
      return null;
  }
}
