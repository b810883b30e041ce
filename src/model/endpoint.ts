/**
 * Endpoints: the proxy's immutable record of one backend of one service port.
 *
 * Built from EndpointSlices by `convert_endpoint_slice.ts`; the conditions follow
 * discovery.k8s.io/v1 semantics with upstream's defaults already applied (a missing `ready`
 * means ready, a missing `serving` copies `ready`, a missing `terminating` means false).
 *
 * @module
 */

/** One backend address and port of a service port. */
export interface Endpoint {
  /** Canonical address text. */
  readonly ip: string;
  readonly port: number;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  /** `nodeName` of the endpoint, or empty. */
  readonly nodeName: string;
  /** `zone` of the endpoint, or empty. */
  readonly zone: string;
  /** Runs on this proxy's node. */
  readonly isLocal: boolean;
  /** `hints.forZones[].name`, or null when the endpoint has no zone hints. */
  readonly zoneHints: readonly string[] | null;
  /** `hints.forNodes[].name`, or null when the endpoint has no node hints. */
  readonly nodeHints: readonly string[] | null;
}

/** `ip:port` (IPv6 in brackets), as upstream prints an endpoint. */
export function formatEndpoint(ep: { ip: string; port: number }): string {
  return ep.ip.includes(":") ? `[${ep.ip}]:${ep.port}` : `${ep.ip}:${ep.port}`;
}
