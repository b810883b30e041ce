/**
 * Counting service ports whose Local traffic policy finds no local endpoint, for upstream's
 * `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family,traffic_policy}` gauge.
 *
 * Upstream counts, per service port and after each sync: `internalTrafficPolicy: Local` ports
 * without a usable local endpoint (`traffic_policy="internal"`), and `externalTrafficPolicy:
 * Local` ports of externally reachable services without one (`traffic_policy="external"`).
 * "Usable" is endpoint selection's: ready local endpoints, else serving-and-terminating ones.
 * Upstream runs one proxier per family and each counts its own: a port counts in a family when it
 * has a cluster IP of that family and no usable local endpoint of that family (the renderers'
 * view of a port in a family).
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import { familyOf, type IPFamily, type ServicePort } from "../model/service_port.ts";
import { selectEndpoints } from "../render/endpoints.ts";

/** Service ports with a Local policy and no local endpoint, by policy. */
export interface NoLocalEndpoints {
  readonly internal: number;
  readonly external: number;
}

/**
 * Counts, per family, the service ports whose Local traffic policy has no usable local endpoint
 * of that family. Pure; ports without a Local policy cost one property check.
 *
 * @example
 * ```ts
 * metrics.noLocalEndpoints(countNoLocalEndpoints(state.services, state.endpoints, "node-a"));
 * ```
 */
export function countNoLocalEndpoints(
  services: ReadonlyMap<string, ServicePort>,
  endpoints: ReadonlyMap<string, readonly Endpoint[]>,
  nodeName: string,
): Record<IPFamily, NoLocalEndpoints> {
  const counts = { IPv4: { internal: 0, external: 0 }, IPv6: { internal: 0, external: 0 } };
  for (const [key, port] of services) {
    if (!port.internalPolicyLocal && !port.externalPolicyLocal) continue;
    const all = endpoints.get(key) ?? [];
    for (const family of new Set(port.clusterIPs.map(familyOf))) {
      const inFamily = all.filter((ep) => familyOf(ep.ip) === family);
      const { local } = selectEndpoints(port, inFamily, { nodeName, zone: "" });
      if (local.length > 0) continue;
      if (port.internalPolicyLocal) counts[family].internal++;
      if (port.externalPolicyLocal) counts[family].external++;
    }
  }
  return counts;
}
