/**
 * Render options for one nft family, derived from the configuration and the node: the one place
 * where `detectLocalMode`, `masqueradeAll` and the service CIDRs become rule text.
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import type { NodeInfo } from "../../model/node.ts";
import { familyOf } from "../../model/service_port.ts";
import { ipFamilyOf, type NftRenderOptions } from "./ruleset.ts";
import type { NftFamily } from "./transaction.ts";

/** What the options depend on besides the configuration. */
export interface ClusterFacts {
  readonly node: NodeInfo | null;
  readonly serviceCIDRs: readonly string[];
}

/** The render options of one family. */
export function nftRenderOptions(
  config: Config,
  facts: ClusterFacts,
  family: NftFamily,
): NftRenderOptions {
  const ipFamily = ipFamilyOf(family);
  const ofFamily = (cidrs: readonly string[]) =>
    cidrs.filter((c) => familyOf(c.split("/")[0]) === ipFamily);
  return {
    table: config.tableName,
    family,
    masqueradeBit: config.masqueradeBit,
    masqueradeAll: config.masqueradeAll,
    notLocalMatch: notLocalMatch(config, facts.node, family, ofFamily),
    serviceCIDRs: ofFamily(facts.serviceCIDRs),
  };
}

function notLocalMatch(
  config: Config,
  node: NodeInfo | null,
  family: NftFamily,
  ofFamily: (cidrs: readonly string[]) => string[],
): string | null {
  // One CIDR per family (upstream allows no more); never an inline set in a per-service rule.
  const cidrMatch = (cidrs: string[]) =>
    cidrs.length === 0 ? null : `${family} saddr != ${cidrs[0]}`;
  switch (config.detectLocalMode) {
    case "ClusterCIDR":
      return cidrMatch(ofFamily(config.clusterCIDRs));
    case "NodeCIDR":
      return cidrMatch(ofFamily(node?.podCIDRs ?? []));
    case "BridgeInterface":
      return config.bridgeInterface ? `iifname != "${config.bridgeInterface}"` : null;
    case "InterfaceNamePrefix":
      return config.interfaceNamePrefix ? `iifname != "${config.interfaceNamePrefix}*"` : null;
    case "None":
      return null;
  }
}
