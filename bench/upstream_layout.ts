/**
 * The reference the daemon benchmark compares a cold start with: a synthetic cluster's
 * ClusterIP services written in upstream kube-proxy 1.36's nftables layout, to be loaded with
 * `nft -f` alone.
 *
 * That layout (DESIGN.md §3) has one chain per service port whose second rule carries the
 * endpoints in an inline (anonymous) `numgen random mod N map`, reached through the
 * `service-ips` verdict map:
 *
 * ```
 * chain service-XXXXXXXX-ns/name/tcp/p {
 *   ip daddr 10.96.1.1 tcp dport 80 ip saddr != 10.128.0.0/9 jump mark-for-masquerade
 *   meta l4proto tcp dnat to numgen random mod 2 map { 0 : 10.128.0.2 . 8080, 1 : 10.128.0.3 . 8080 }
 * }
 * ```
 *
 * Every inline set costs the kernel a scan of all sets in the table, which is why it grows
 * quadratically with the number of services. Only what decides the load time is written: the
 * base chains, the masquerade chains, `service-ips`, `cluster-ips` and the per-service chains
 * and elements (ClusterIP only: node ports, external and load-balancer IPs and the filter
 * chains are left out; services without endpoints get no chain). Chain names follow upstream's
 * `service-HASH-namespace/name/protocol/port` form with a stand-in hash. The chains and rules
 * come first and every element last: at 10k×10 that order loaded in 23 s here where one
 * service's chain, rules and elements after another took 30-36 s, so the reference is the
 * kinder of the two to upstream.
 *
 * Pure: objects in, script text out.
 *
 * @module
 */
import type { RawObject } from "../src/source/events.ts";
import { BENCH_POD_CIDR, type SyntheticCluster } from "./cluster.ts";

/** Options of {@link renderUpstreamLayout}. */
export interface UpstreamLayoutOptions {
  /** Table name. Default `kube-proxy`, upstream's. */
  table?: string;
  /** The pod network: traffic from outside it to a cluster IP is marked for masquerade. */
  clusterCIDR?: string;
}

/**
 * The whole `nft -f` script of `cluster`'s ClusterIP services in upstream 1.36's layout.
 *
 * @example
 * ```ts
 * const script = renderUpstreamLayout(generateCluster({ services: 10_000, endpoints: 10 }));
 * ```
 */
export function renderUpstreamLayout(
  cluster: Pick<SyntheticCluster, "services" | "slices">,
  options: UpstreamLayoutOptions = {},
): string {
  const t = `ip ${options.table ?? "kube-proxy"}`;
  const clusterCIDR = options.clusterCIDR ?? BENCH_POD_CIDR;
  const out: string[] = [
    `add table ${t} { comment "rules for kube-proxy" ; }`,
    `add chain ${t} nat-prerouting { type nat hook prerouting priority dstnat ; }`,
    `add chain ${t} nat-output { type nat hook output priority -100 ; }`,
    `add chain ${t} nat-postrouting { type nat hook postrouting priority srcnat ; }`,
    `add chain ${t} services`,
    `add chain ${t} mark-for-masquerade`,
    `add chain ${t} masquerading`,
    `add set ${t} cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }`,
    `add map ${t} service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; ` +
    `comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }`,
    `add rule ${t} nat-prerouting jump services`,
    `add rule ${t} nat-output jump services`,
    `add rule ${t} nat-postrouting jump masquerading`,
    `add rule ${t} mark-for-masquerade mark set mark or 0x4000`,
    `add rule ${t} masquerading mark and 0x4000 == 0 return`,
    `add rule ${t} masquerading mark set mark xor 0x4000`,
    `add rule ${t} masquerading masquerade fully-random`,
    `add rule ${t} services ip daddr . meta l4proto . th dport vmap @service-ips`,
  ];
  const elements: string[] = [];
  cluster.services.forEach((service, i) => {
    const spec = record(service.spec);
    const metadata = record(service.metadata);
    const clusterIP = strings(spec.clusterIPs)[0] ?? String(spec.clusterIP ?? "");
    const targets = endpointsOf(cluster.slices[i] ?? []);
    for (const port of records(spec.ports)) {
      const protocol = String(port.protocol ?? "TCP").toLowerCase();
      const portName = String(port.name ?? "");
      const id = `${metadata.namespace}/${metadata.name}/${protocol}/${portName}`;
      const chain = `service-${standInHash(id)}-${id}`;
      const backends = targets.filter((e) => e.portName === portName && e.protocol === protocol);
      elements.push(`add element ${t} cluster-ips { ${clusterIP} }`);
      if (backends.length === 0) continue;
      const map = backends.map((e, k) => `${k} : ${e.ip} . ${e.port}`).join(", ");
      out.push(
        `add chain ${t} ${chain}`,
        `add rule ${t} ${chain} ip daddr ${clusterIP} ${protocol} dport ${port.port} ` +
          `ip saddr != ${clusterCIDR} jump mark-for-masquerade`,
        `add rule ${t} ${chain} meta l4proto ${protocol} dnat to numgen random mod ` +
          `${backends.length} map { ${map} }`,
      );
      elements.push(
        `add element ${t} service-ips { ${clusterIP} . ${protocol} . ${port.port} : goto ${chain} }`,
      );
    }
  });
  return [...out, ...elements].join("\n") + "\n";
}

interface Backend {
  ip: string;
  port: number;
  portName: string;
  protocol: string;
}

/** The ready endpoints of a service's slices, one per address and slice port. */
function endpointsOf(slices: readonly RawObject[]): Backend[] {
  const backends: Backend[] = [];
  for (const slice of slices) {
    for (const port of records(slice.ports)) {
      for (const endpoint of records(slice.endpoints)) {
        if (record(endpoint.conditions).ready === false) continue;
        const ip = strings(endpoint.addresses)[0];
        if (ip === undefined) continue;
        backends.push({
          ip,
          port: Number(port.port),
          portName: String(port.name ?? ""),
          protocol: String(port.protocol ?? "TCP").toLowerCase(),
        });
      }
    }
  }
  return backends;
}

/** Eight base32 characters derived from `text` (upstream uses a SHA-256 prefix). */
function standInHash(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let out = "";
  for (let i = 0; i < 8; i++) {
    out += alphabet[(h >>> (i * 4)) & 31];
    if (i === 3) h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d);
  }
  return out;
}

function record(value: unknown): Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value)
    ? value as Record<string, unknown>
    : {};
}

function records(value: unknown): Record<string, unknown>[] {
  return Array.isArray(value) ? value.map(record) : [];
}

function strings(value: unknown): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
}
