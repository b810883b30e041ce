/**
 * Endpoint selection: which endpoints of a service port receive cluster traffic and which
 * receive local (node-restricted) traffic, shared by the nft and iptables renderers.
 *
 * Follows upstream's CategorizeEndpoints (`pkg/proxy/topology.go`): ready endpoints first; when
 * none is ready, endpoints that are serving and terminating take their place — decided
 * separately for cluster and local traffic. Topology hints narrow the ready cluster endpoints
 * only when every ready endpoint carries some: node hints (PreferSameNode) when one names this
 * node, else zone hints when one names this node's zone. The terminating fallback ignores
 * topology, as upstream's: it is a best effort not to drop connections. Results are sorted by
 * address and port so element indices are stable.
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
  /** Some endpoint can take traffic at all (else connections are rejected). */
  readonly any: boolean;
}

/** Where this proxy runs, for topology hints. */
export interface NodeTopology {
  readonly nodeName: string;
  /** The node's `topology.kubernetes.io/zone`, or empty. */
  readonly zone: string;
}

/** Selects cluster and local endpoints of one service port. */
export function selectEndpoints(
  port: ServicePort,
  endpoints: readonly Endpoint[],
  node: NodeTopology,
): EndpointSelection {
  const sorted = [...endpoints].sort(compareEndpoints);
  const usesLocal = port.internalPolicyLocal || port.externalPolicyLocal;
  const local = usesLocal ? usable(sorted.filter((ep) => ep.isLocal)) : [];
  const ready = sorted.filter((ep) => ep.ready);
  const cluster = ready.length > 0 ? byTopology(ready, node) : terminating(sorted);
  return { cluster, local, any: cluster.length > 0 || local.length > 0 };
}

/** Ready endpoints, else serving-and-terminating ones. */
function usable(endpoints: readonly Endpoint[]): readonly Endpoint[] {
  const ready = endpoints.filter((ep) => ep.ready);
  return ready.length > 0 ? ready : terminating(endpoints);
}

function terminating(endpoints: readonly Endpoint[]): readonly Endpoint[] {
  return endpoints.filter((ep) => ep.serving && ep.terminating);
}

/**
 * Narrows endpoints by node or zone hints when every endpoint has some (an empty list counts as
 * none, as upstream's `Len() == 0`) and one matches.
 */
function byTopology(endpoints: readonly Endpoint[], node: NodeTopology): readonly Endpoint[] {
  if (endpoints.length === 0) return endpoints;
  if (node.nodeName !== "" && endpoints.every((ep) => (ep.nodeHints?.length ?? 0) > 0)) {
    const sameNode = endpoints.filter((ep) => ep.nodeHints!.includes(node.nodeName));
    if (sameNode.length > 0) return sameNode;
  }
  if (node.zone === "" || !endpoints.every((ep) => (ep.zoneHints?.length ?? 0) > 0)) {
    return endpoints;
  }
  const sameZone = endpoints.filter((ep) => ep.zoneHints!.includes(node.zone));
  return sameZone.length > 0 ? sameZone : endpoints;
}

function compareEndpoints(a: Endpoint, b: Endpoint): number {
  if (a.ip !== b.ip) return a.ip < b.ip ? -1 : 1;
  return a.port - b.port;
}
