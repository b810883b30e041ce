/**
 * Service ports: the proxy's immutable record of one port of one Service, and its name.
 *
 * A {@link ServicePort} holds only what the renderers need, already validated and normalised
 * (addresses in canonical text form, protocol upper-case). Conversion from API objects lives in
 * `convert_service.ts`; nothing else reads raw Services.
 *
 * @module
 */

/** Transport protocols a Service port can use. */
export type Protocol = "TCP" | "UDP" | "SCTP";

/** All protocols, in rendering order. */
export const PROTOCOLS: readonly Protocol[] = ["TCP", "UDP", "SCTP"];

/** An IP family. */
export type IPFamily = "IPv4" | "IPv6";

/** Identifies one port of one Service, like upstream's `ServicePortName`. */
export interface ServicePortName {
  readonly namespace: string;
  readonly name: string;
  /** The port's name; empty for a Service's only, unnamed port. */
  readonly port: string;
  readonly protocol: Protocol;
}

/** `namespace/name:port` (or `namespace/name` for an unnamed port), as upstream prints it. */
export function formatServicePortName(spn: ServicePortName): string {
  return spn.port === ""
    ? `${spn.namespace}/${spn.name}`
    : `${spn.namespace}/${spn.name}:${spn.port}`;
}

/**
 * The key that identifies a service port in maps and change sets:
 * `namespace/name:port/PROTOCOL`, each name percent-encoded so that names holding `/` or `:`
 * (a file source allows them) can never make two ports share a key.
 */
export function servicePortKey(spn: ServicePortName): string {
  return `${serviceKey(spn)}:${encodeURIComponent(spn.port)}/${spn.protocol}`;
}

/** `namespace/name` of a Service (percent-encoded like {@link servicePortKey}). */
export function serviceKey(spn: { namespace: string; name: string }): string {
  return `${encodeURIComponent(spn.namespace)}/${encodeURIComponent(spn.name)}`;
}

/** ClientIP session affinity of a service port. */
export interface SessionAffinity {
  /** How long a client sticks to its endpoint after its last packet, in seconds. */
  readonly timeoutSeconds: number;
}

/** One port of one Service, as the proxy programs it. */
export interface ServicePort {
  readonly name: ServicePortName;
  /** The Service's `spec.type`. */
  readonly type: "ClusterIP" | "NodePort" | "LoadBalancer";
  /** Port on the cluster IPs, external IPs and load-balancer IPs. */
  readonly port: number;
  /** Cluster IPs of every family (`spec.clusterIPs`, or `spec.clusterIP`). */
  readonly clusterIPs: readonly string[];
  /** Node port, or 0 when the port has none. */
  readonly nodePort: number;
  /** `spec.externalIPs`. */
  readonly externalIPs: readonly string[];
  /** `status.loadBalancer.ingress[].ip`, except entries with `ipMode: Proxy`. */
  readonly loadBalancerIPs: readonly string[];
  /** `spec.loadBalancerSourceRanges`, trimmed and validated CIDRs. */
  readonly loadBalancerSourceRanges: readonly string[];
  /** ClientIP affinity, or null for none. */
  readonly sessionAffinity: SessionAffinity | null;
  /** `externalTrafficPolicy: Local` (only meaningful with external addresses or node ports). */
  readonly externalPolicyLocal: boolean;
  /** `internalTrafficPolicy: Local`. */
  readonly internalPolicyLocal: boolean;
  /** `spec.healthCheckNodePort`, or 0. */
  readonly healthCheckNodePort: number;
}

/** The family of a canonical address string. */
export function familyOf(address: string): IPFamily {
  return address.includes(":") ? "IPv6" : "IPv4";
}
