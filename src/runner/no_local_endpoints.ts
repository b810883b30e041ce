/**
 * Counting service ports whose Local traffic policy finds no local endpoint, for upstream's
 * `kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy}` gauge.
 *
 * Upstream counts, per service port and after each sync: `internalTrafficPolicy: Local` ports
 * without a usable local endpoint (`traffic_policy="internal"`), and `externalTrafficPolicy:
 * Local` ports of externally reachable services without one (`traffic_policy="external"`).
 * "Usable" is endpoint selection's: ready local endpoints, else serving-and-terminating ones.
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import type { ServicePort } from "../model/service_port.ts";
import { selectEndpoints } from "../render/endpoints.ts";

/** Service ports with a Local policy and no local endpoint, by policy. */
export interface NoLocalEndpoints {
  readonly internal: number;
  readonly external: number;
}

/**
 * Counts the service ports whose Local traffic policy has no usable local endpoint. Pure; ports
 * without a Local policy cost one property check.
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
): NoLocalEndpoints {
  let internal = 0;
  let external = 0;
  for (const [key, port] of services) {
    if (!port.internalPolicyLocal && !port.externalPolicyLocal) continue;
    const { local } = selectEndpoints(port, endpoints.get(key) ?? [], { nodeName, zone: "" });
    if (local.length > 0) continue;
    if (port.internalPolicyLocal) internal++;
    if (port.externalPolicyLocal) external++;
  }
  return { internal, external };
}
