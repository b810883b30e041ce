/**
 * Render options for one iptables family, derived from the configuration and the node: the one
 * place where `detectLocalMode`, `masqueradeAll`, `masqueradeBit`, `nodePortAddresses` and the
 * service CIDRs become iptables match text or addresses.
 *
 * The node-port addresses and service CIDRs are the shared family facts (family_facts.ts), so
 * both back ends serve node ports on exactly the same addresses (never on loopback: upstream's
 * iptables mode allows `127.0.0.1` node ports with `route_localnet`, this proxy's contract
 * does not).
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import type { NodeInfo } from "../../model/node.ts";
import { canonicalConfigCIDRs } from "../../model/ip.ts";
import { familyOf, type IPFamily } from "../../model/service_port.ts";
import { type FamilyFacts, familyFacts } from "../family_facts.ts";
import type { ClusterFacts } from "../planner.ts";

/** How one family's iptables rules are rendered: the family's facts and iptables' settings. */
export interface IptablesRenderOptions extends FamilyFacts {
  readonly family: IPFamily;
  /** Masquerade all traffic to cluster IPs. */
  readonly masqueradeAll: boolean;
  /** The masquerade mark as upstream prints it (`%#08x`): bit 14 is `0x004000`. */
  readonly masqueradeMark: string;
  /** Match for "comes from a local pod" (`-s 10.244.0.0/16`, `-i cbr0`, `-i veth+`), or null. */
  readonly localMatch: string | null;
  /** Match for "does not come from a local pod" (`! -s 10.244.0.0/16`), or null. */
  readonly notLocalMatch: string | null;
  /**
   * KUBE-FORWARD drops packets conntrack calls INVALID (upstream does, unless the kernel's
   * `nf_conntrack_tcp_be_liberal` is set). Default true.
   */
  readonly dropInvalid: boolean;
  /** MASQUERADE with `--random-fully` (every iptables this proxy supports has it). */
  readonly randomFully: boolean;
  /**
   * Upstream's large-cluster mode (more than 1000 endpoints in the family): endpoint rules and
   * KUBE-SEP-* chains carry no comments, which shrinks the script by about a third.
   */
  readonly largeClusterMode: boolean;
}

/** Endpoint count above which {@link IptablesRenderOptions.largeClusterMode} is on (upstream's). */
export const LARGE_CLUSTER_ENDPOINTS = 1000;

/** Options of {@link iptablesRenderOptions} that do not come from the configuration. */
export interface IptablesFacts extends ClusterFacts {
  /** Endpoints of this family in the whole state (selects large-cluster mode). Default 0. */
  readonly totalEndpoints?: number;
  /** The kernel's `nf_conntrack_tcp_be_liberal` is set (no INVALID drop). Default false. */
  readonly conntrackTCPLiberal?: boolean;
}

/** The render options of one family. */
export function iptablesRenderOptions(
  config: Config,
  facts: IptablesFacts,
  family: IPFamily,
): IptablesRenderOptions {
  const shared = familyFacts(config, facts, family);
  const detector = localDetector(config, facts.node, family);
  return {
    family,
    masqueradeMark: `0x${(1 << config.masqueradeBit >>> 0).toString(16).padStart(6, "0")}`,
    masqueradeAll: config.masqueradeAll,
    localMatch: detector?.local ?? null,
    notLocalMatch: detector?.notLocal ?? null,
    serviceCIDRs: shared.serviceCIDRs,
    nodePortsOnAllAddresses: shared.nodePortsOnAllAddresses,
    nodePortIPs: shared.nodePortIPs,
    nodeIPs: shared.nodeIPs,
    nodeName: shared.nodeName,
    zone: shared.zone,
    dropInvalid: !(facts.conntrackTCPLiberal ?? false),
    randomFully: true,
    largeClusterMode: (facts.totalEndpoints ?? 0) > LARGE_CLUSTER_ENDPOINTS,
  };
}

/** Interface names iptables accepts in `-i` (a `+` suffix is added for prefixes). */
const INTERFACE_NAME = /^[A-Za-z0-9_.@-]{1,15}$/;

function localDetector(
  config: Config,
  node: NodeInfo | null,
  family: IPFamily,
): { local: string; notLocal: string | null } | null {
  // One CIDR per family, like upstream's detector. Every source is inside a /0, so nothing is
  // "not local" (and iptables-nft refuses `! -s 0.0.0.0/0`).
  const byCIDR = (cidrs: readonly string[]) => {
    const cidr = cidrs.find((c) => familyOf(c.split("/")[0]) === family);
    if (cidr === undefined) return null;
    return { local: `-s ${cidr}`, notLocal: cidr.endsWith("/0") ? null : `! -s ${cidr}` };
  };
  const byInterface = (name: string, suffix: string) =>
    INTERFACE_NAME.test(name)
      ? { local: `-i ${name}${suffix}`, notLocal: `! -i ${name}${suffix}` }
      : null;
  switch (config.detectLocalMode) {
    case "ClusterCIDR":
      // Canonical: iptables, like nft, would read `010.244.0.0/16` as octal (8.244.0.0/16).
      return byCIDR(canonicalConfigCIDRs(config.clusterCIDRs));
    case "NodeCIDR":
      return byCIDR(node?.podCIDRs ?? []);
    case "BridgeInterface":
      return byInterface(config.bridgeInterface, "");
    case "InterfaceNamePrefix":
      return byInterface(config.interfaceNamePrefix, "+");
    case "None":
      return null;
  }
}
