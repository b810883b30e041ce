/**
 * Endpoint selection: which endpoints of a service port receive cluster traffic and which
 * receive local (node-restricted) traffic, shared by the nft and iptables renderers.
 *
 * Follows upstream's CategorizeEndpoints: ready endpoints first; when none is ready, endpoints
 * that are serving and terminating take their place — decided separately for cluster and local
 * traffic. Results are sorted by address and port so element indices are stable.
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import type { ServicePort } from "../model/service_port.ts";

/** The endpoints a service port's traffic may go to. */
export interface EndpointSelection {
  /** Endpoints for cluster-wide traffic (empty when none usable). */
  readonly cluster: readonly Endpoint[];
  /** Endpoints on this node, for eTP/iTP Local traffic (empty when none usable). */
  readonly local: readonly Endpoint[];
}

/** Selects cluster and local endpoints of one service port. */
export function selectEndpoints(
  _port: ServicePort,
  endpoints: readonly Endpoint[],
): EndpointSelection {
  const sorted = [...endpoints].sort(compareEndpoints);
  return {
    cluster: usable(sorted),
    local: usable(sorted.filter((ep) => ep.isLocal)),
  };
}

/** Ready endpoints, else serving-and-terminating ones. */
function usable(endpoints: readonly Endpoint[]): readonly Endpoint[] {
  const ready = endpoints.filter((ep) => ep.ready);
  if (ready.length > 0) return ready;
  return endpoints.filter((ep) => ep.serving && ep.terminating);
}

function compareEndpoints(a: Endpoint, b: Endpoint): number {
  if (a.ip !== b.ip) return a.ip < b.ip ? -1 : 1;
  return a.port - b.port;
}
