/**
 * Render options for one nft family, derived from the configuration and the cluster facts: the
 * one place where `detectLocalMode`, `masqueradeAll`, `masqueradeBit` and `scheduler` reach
 * the renderer, and where the first three become nft rule text
 * (the node-port addresses and service CIDRs come from the shared family facts).
 *
 * @module
 */
import type { Config, EndpointScheduler } from "../../config/config.ts";
import { canonicalConfigCIDRs } from "../../model/ip.ts";
import type { NodeInfo } from "../../model/node.ts";
import { familyOf } from "../../model/service_port.ts";
import { type FamilyFacts, familyFacts } from "../family_facts.ts";
import type { ClusterFacts } from "../planner.ts";
import { ipFamilyOf, type NftFamily } from "./transaction.ts";

/** How a family's ruleset is rendered: the family's facts plus nft's own settings. */
export interface NftRenderOptions extends FamilyFacts {
  /** Table name (same in both families). */
  readonly table: string;
  readonly family: NftFamily;
  /** Bit of the packet mark that requests masquerading (0-31). */
  readonly masqueradeBit: number;
  /** Masquerade all traffic to cluster IPs. */
  readonly masqueradeAll: boolean;
  /** nft match for "comes from a local pod" (e.g. `ip saddr 10.244.0.0/16`), or null. */
  readonly localMatch: string | null;
  /** nft match for "does NOT come from a local pod", or null when there is no detector. */
  readonly notLocalMatch: string | null;
  /** How a balancer picks the endpoint of a new connection (see scheduler.ts). */
  readonly scheduler: EndpointScheduler;
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
  const shared = familyFacts(config, facts, ipFamily);
  return {
    table: config.tableName,
    family,
    masqueradeBit: config.masqueradeBit,
    masqueradeAll: config.masqueradeAll,
    localMatch: detector?.local ?? null,
    notLocalMatch: detector?.notLocal ?? null,
    scheduler: config.scheduler,
    serviceCIDRs: shared.serviceCIDRs,
    nodePortsOnAllAddresses: shared.nodePortsOnAllAddresses,
    nodePortIPs: shared.nodePortIPs,
    nodeIPs: shared.nodeIPs,
    nodeName: shared.nodeName,
    zone: shared.zone,
  };
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
