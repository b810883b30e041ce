/**
 * Nodes and ServiceCIDRs: what the proxy needs from its own Node object and from the cluster's
 * service CIDRs, validated.
 *
 * @module
 */
import { parseAddress, parseCIDR } from "./ip.ts";
import { get, getArray, getString, getStringMap, printable } from "./raw.ts";

/** Label carrying a Node's zone. */
export const ZONE_LABEL = "topology.kubernetes.io/zone";

/** The cluster autoscaler's taint on a node it is about to delete. */
export const TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler";

/** This proxy's node, as far as rules depend on it. */
export interface NodeInfo {
  readonly name: string;
  /** Primary node IPs, at most one per family (InternalIP preferred, then ExternalIP). */
  readonly ips: readonly string[];
  /** `topology.kubernetes.io/zone`, or empty. */
  readonly zone: string;
  /** `spec.podCIDRs` (or `spec.podCIDR`), canonical. */
  readonly podCIDRs: readonly string[];
  /**
   * The Node is going away: it has a deletionTimestamp, or the cluster autoscaler's
   * {@link TO_BE_DELETED_TAINT} (load balancers should stop sending it new connections).
   */
  readonly deleting: boolean;
}

/** Converts a raw v1 Node; invalid addresses and CIDRs are dropped with warnings. */
export function convertNode(raw: unknown): { node: NodeInfo; warnings: string[] } {
  const name = getString(raw, ["metadata", "name"]) ?? "";
  const warnings: string[] = [];
  const byFamily = new Map<string, string>();
  for (const type of ["InternalIP", "ExternalIP"]) {
    for (const entry of getArray(raw, ["status", "addresses"]) ?? []) {
      if (get(entry, "type") !== type) continue;
      const parsed = parseAddress(get(entry, "address"));
      if (!parsed.ok) {
        warnings.push(`ignoring an address of Node ${printable(name)}: ${parsed.reason}`);
      } else if (!byFamily.has(parsed.family)) byFamily.set(parsed.family, parsed.address);
    }
  }
  const cidrs = getArray(raw, ["spec", "podCIDRs"]) ?? [];
  const single = getString(raw, ["spec", "podCIDR"]) ?? "";
  const podCIDRs: string[] = [];
  for (const text of cidrs.length > 0 ? cidrs : single === "" ? [] : [single]) {
    const parsed = parseCIDR(text);
    if (parsed.ok) podCIDRs.push(parsed.cidr);
    else warnings.push(`ignoring a pod CIDR of Node ${printable(name)}: ${parsed.reason}`);
  }
  const ips = ["IPv4", "IPv6"].flatMap((f) => byFamily.has(f) ? [byFamily.get(f)!] : []);
  return {
    warnings,
    node: Object.freeze({
      name,
      ips: Object.freeze(ips),
      zone: getStringMap(raw, ["metadata", "labels"])[ZONE_LABEL] ?? "",
      podCIDRs: Object.freeze(podCIDRs),
      deleting: get(raw, "metadata", "deletionTimestamp") !== undefined ||
        (getArray(raw, ["spec", "taints"]) ?? []).some((t) =>
          get(t, "key") === TO_BE_DELETED_TAINT
        ),
    }),
  };
}

/** The CIDRs of a `networking.k8s.io/v1` ServiceCIDR; invalid ones dropped with warnings. */
export function convertServiceCIDR(raw: unknown): { cidrs: string[]; warnings: string[] } {
  const name = getString(raw, ["metadata", "name"]) ?? "";
  const cidrs: string[] = [];
  const warnings: string[] = [];
  for (const text of getArray(raw, ["spec", "cidrs"]) ?? []) {
    const parsed = parseCIDR(text);
    if (parsed.ok) cidrs.push(parsed.cidr);
    else warnings.push(`ignoring a CIDR of ServiceCIDR ${printable(name)}: ${parsed.reason}`);
  }
  return { cidrs, warnings };
}
