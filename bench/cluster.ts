/**
 * Synthetic clusters for benchmarks: N Services × M endpoints as raw API objects (Services,
 * EndpointSlices, this proxy's Node and the ServiceCIDR), deterministic for a given seed.
 *
 * Pure: no I/O, no clock, no global random state. The same options always produce the same
 * objects, so results compare run to run. Addresses:
 * - cluster IPs: spread over {@link BENCH_SERVICE_CIDR} (a /12, like kubeadm's default range),
 *   never inside its first /24 (`10.96.0.0/24` is left for hand-made services such as the
 *   data-plane benchmark's target and the API server's `10.96.0.1`);
 * - endpoints: pods in {@link BENCH_POD_CIDR}, ≤ 100 per node, each node its own /24; node 0 is
 *   the proxy's own node (so a share of endpoints is local, as on a real node);
 * - node ports 30000-32767, load-balancer IPs in 172.16.0.0/12, external IPs in 198.18.0.0/15.
 *
 * The feature mix (NodePort, LoadBalancer, externalIPs, ClientIP affinity, traffic policies,
 * UDP) is a parameter; by default every Service is a plain TCP ClusterIP Service.
 *
 * @example
 * ```ts
 * const cluster = generateCluster({ services: 10_000, endpoints: 10 });
 * const state = new ProxyState({ hostname: cluster.nodeName, log: () => {} });
 * for (const event of clusterEvents(cluster)) state.onEvent(event);
 * ```
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import { endpointSlice, node, service, serviceCIDR } from "../tests/fixtures/objects.ts";
import { NODE_IP_V4, NODE_NAME } from "../tests/fixtures/ip_plan.ts";
import type { ObjectEvent, RawObject } from "../src/source/events.ts";

/** The service CIDR every synthetic cluster allocates its cluster IPs from. */
export const BENCH_SERVICE_CIDR = "10.96.0.0/12";
/** The pod network (upstream `clusterCIDR`) of every synthetic cluster. */
export const BENCH_POD_CIDR = "10.128.0.0/9";
/** Most endpoints one EndpointSlice holds (upstream's default `maxEndpointsPerSlice`). */
export const MAX_ENDPOINTS_PER_SLICE = 100;
/** Pods per node: each node has a /24 of the pod network. */
export const PODS_PER_NODE = 100;

/** Share (0-1) of Services having each feature; every share defaults to 0. */
export interface ServiceMix {
  /** `type: NodePort` (one node port per service port). */
  nodePort?: number;
  /** `type: LoadBalancer` with one ingress IP (and a node port). */
  loadBalancer?: number;
  /** One `spec.externalIPs` entry. */
  externalIPs?: number;
  /** `sessionAffinity: ClientIP` (timeout 10800 s, upstream's default). */
  clientIPAffinity?: number;
  /** Of the externally reachable Services: `externalTrafficPolicy: Local`. */
  externalTrafficPolicyLocal?: number;
  /** `internalTrafficPolicy: Local`. */
  internalTrafficPolicyLocal?: number;
  /** UDP instead of TCP. */
  udp?: number;
}

/** Options of {@link generateCluster}. */
export interface ClusterOptions {
  /** Number of Services (one port each). */
  services: number;
  /** Endpoints per Service (split into slices of at most 100). */
  endpoints: number;
  /** Seed of every random choice. Default 1. */
  seed?: number;
  /** Feature shares. Default: plain TCP ClusterIP Services only. */
  mix?: ServiceMix;
  /** The proxy's node name (node 0 of the cluster). Default `node-a` (the test IP plan's). */
  nodeName?: string;
  /** The proxy's node IP. Default the test IP plan's node IP. */
  nodeIP?: string;
}

/** A generated cluster: raw objects plus what a proxy configuration needs to know. */
export interface SyntheticCluster {
  /** The options it was generated from, with defaults filled in. */
  readonly options: Readonly<Required<Omit<ClusterOptions, "mix">>> & {
    readonly mix: Readonly<Required<ServiceMix>>;
  };
  /** The proxy's node name (hostname override). */
  readonly nodeName: string;
  /** The proxy's Node object. */
  readonly node: RawObject;
  /** The ServiceCIDR object holding {@link BENCH_SERVICE_CIDR}. */
  readonly serviceCIDR: RawObject;
  /** One Service per index. */
  readonly services: readonly RawObject[];
  /** The slices of Service `i` are `slices[i]` (one slice unless endpoints > 100). */
  readonly slices: readonly (readonly RawObject[])[];
  /** The first cluster IP of Service `i`. */
  clusterIP(index: number): string;
}

const NODE_PORT_MIN = 30000;
const NODE_PORT_MAX = 32767;
const SERVICE_PORTS = [80, 443, 8080, 8443, 9090, 6379, 5432, 3306, 53, 11211];
const FULL_MIX: Required<ServiceMix> = {
  nodePort: 0,
  loadBalancer: 0,
  externalIPs: 0,
  clientIPAffinity: 0,
  externalTrafficPolicyLocal: 0,
  internalTrafficPolicyLocal: 0,
  udp: 0,
};

/** Cluster IPs come from offsets 256 … 2^20-1 of the /12, visited in a seeded permutation. */
const SERVICE_OFFSET_FIRST = 256;
const SERVICE_OFFSETS = (1 << 20) - SERVICE_OFFSET_FIRST;
/** A prime larger than the range: `i × stride mod range` visits every offset once. */
const SERVICE_STRIDE = 1_000_003;
/** Most nodes: /24s of the /9 pod network below {@link EXTRA_ENDPOINT_BASE}. */
const MAX_NODES = 127 * 256;
/** 10.96.0.0: start of {@link BENCH_SERVICE_CIDR}. */
const SERVICE_BASE = 0x0a600000;
/** 10.128.0.0: start of {@link BENCH_POD_CIDR}; node k holds 10.128.k.0/24 (k < 2^15). */
const POD_BASE = 0x0a800000;
/** 10.255.0.0/16: endpoints added after generation ({@link extraEndpointIP}). */
const EXTRA_ENDPOINT_BASE = 0x0aff0000;
/** 172.16.0.0/12: load-balancer ingress IPs, one per LoadBalancer Service. */
const LOAD_BALANCER_BASE = 0xac100000;
/** 198.18.0.0/15: external IPs, one per Service that has one. */
const EXTERNAL_IP_BASE = 0xc6120000;

/**
 * Generates a cluster of `services` Services with `endpoints` ready endpoints each.
 * Throws a `RangeError` when the sizes do not fit the address or node-port ranges.
 *
 * @example
 * ```ts
 * const c = generateCluster({ services: 1000, endpoints: 10, mix: { nodePort: 0.1 } });
 * c.services.length; // 1000
 * ```
 */
export function generateCluster(options: ClusterOptions): SyntheticCluster {
  const { services: count, endpoints } = options;
  const seed = options.seed ?? 1;
  const mix = { ...FULL_MIX, ...options.mix };
  const nodeName = options.nodeName ?? NODE_NAME;
  const nodeIP = options.nodeIP ?? NODE_IP_V4;
  checkSizes(count, endpoints, mix);
  const nodes = Math.max(1, Math.ceil((count * endpoints) / PODS_PER_NODE));
  if (nodes > MAX_NODES) {
    throw new RangeError(`cannot place ${count * endpoints} endpoints: at most ${MAX_NODES} nodes`);
  }
  const random = mulberry32(seed);
  const start = Math.floor(random() * SERVICE_OFFSETS);
  const clusterIP = (index: number) => {
    if (!Number.isInteger(index) || index < 0 || index >= count) {
      throw new RangeError(`cannot use service index ${index}: must be 0-${count - 1}`);
    }
    const offset = SERVICE_OFFSET_FIRST + (start + index * SERVICE_STRIDE) % SERVICE_OFFSETS;
    return ipv4(SERVICE_BASE + offset);
  };
  let nextNodePort = NODE_PORT_MIN;
  const takeNodePort = () => {
    if (nextNodePort > NODE_PORT_MAX) {
      throw new RangeError(
        `cannot give more services node ports: all of ${NODE_PORT_MIN}-${NODE_PORT_MAX} are taken`,
      );
    }
    return nextNodePort++;
  };
  const services: RawObject[] = [];
  const slices: RawObject[][] = [];
  for (let i = 0; i < count; i++) {
    const name = `svc-${String(i).padStart(6, "0")}`;
    const namespace = `ns-${String(Math.floor(i / 100)).padStart(4, "0")}`;
    const draw = random();
    const type = draw < mix.loadBalancer
      ? "LoadBalancer"
      : draw < mix.loadBalancer + mix.nodePort
      ? "NodePort"
      : "ClusterIP";
    const externalIPs = random() < mix.externalIPs ? [ipv4(EXTERNAL_IP_BASE + i)] : [];
    const affinity = random() < mix.clientIPAffinity;
    const external = type !== "ClusterIP" || externalIPs.length > 0;
    const eTPLocal = random() < mix.externalTrafficPolicyLocal && external;
    const iTPLocal = random() < mix.internalTrafficPolicyLocal;
    const protocol = random() < mix.udp ? "UDP" as const : "TCP" as const;
    const port = SERVICE_PORTS[i % SERVICE_PORTS.length];
    const spec: Record<string, unknown> = {
      ...(externalIPs.length > 0 ? { externalIPs } : {}),
      ...(affinity
        ? {
          sessionAffinity: "ClientIP",
          sessionAffinityConfig: { clientIP: { timeoutSeconds: 10800 } },
        }
        : {}),
      ...(external ? { externalTrafficPolicy: eTPLocal ? "Local" : "Cluster" } : {}),
      ...(iTPLocal ? { internalTrafficPolicy: "Local" } : {}),
      ...(type === "LoadBalancer" && eTPLocal ? { healthCheckNodePort: takeNodePort() } : {}),
    };
    services.push(service({
      namespace,
      name,
      type,
      clusterIPs: [clusterIP(i)],
      ports: [{
        name: "p",
        port,
        protocol,
        targetPort: 8080,
        ...(type === "ClusterIP" ? {} : { nodePort: takeNodePort() }),
      }],
      spec,
      ...(type === "LoadBalancer"
        ? { status: { loadBalancer: { ingress: [{ ip: ipv4(LOAD_BALANCER_BASE + i) }] } } }
        : {}),
    }));
    const pods = Array.from({ length: endpoints }, (_, j) => {
      const global = i * endpoints + j;
      const nodeIndex = global % nodes;
      return {
        ip: ipv4(POD_BASE + nodeIndex * 256 + 2 + Math.floor(global / nodes)),
        nodeName: nodeIndex === 0 ? nodeName : `node-${nodeIndex}`,
      };
    });
    const serviceSlices: RawObject[] = [];
    for (let s = 0; s * MAX_ENDPOINTS_PER_SLICE < Math.max(endpoints, 1); s++) {
      serviceSlices.push(endpointSlice({
        namespace,
        name: `${name}-${s}`,
        service: name,
        ports: [{ name: "p", port: 8080, protocol }],
        endpoints: pods.slice(s * MAX_ENDPOINTS_PER_SLICE, (s + 1) * MAX_ENDPOINTS_PER_SLICE),
      }));
    }
    slices.push(serviceSlices);
  }
  return {
    options: { services: count, endpoints, seed, mix, nodeName, nodeIP },
    nodeName,
    node: node(nodeName, { ips: [nodeIP], podCIDRs: ["10.128.0.0/24"] }),
    serviceCIDR: serviceCIDR("kubernetes", [BENCH_SERVICE_CIDR]),
    services,
    slices,
    clusterIP,
  };
}

/**
 * The add events of a whole cluster, in the order a source lists them: the Node, the
 * ServiceCIDR, every Service, then every EndpointSlice.
 */
export function clusterEvents(cluster: SyntheticCluster): ObjectEvent[] {
  return [
    { kind: "Node", current: cluster.node },
    { kind: "ServiceCIDR", current: cluster.serviceCIDR },
    ...cluster.services.map((current): ObjectEvent => ({ kind: "Service", current })),
    ...cluster.slices.flat().map((current): ObjectEvent => ({ kind: "EndpointSlice", current })),
  ];
}

/**
 * An address for the `n`-th endpoint added after generation (0-65535), in `10.255.0.0/16`:
 * inside the pod network, never used by a generated endpoint.
 */
export function extraEndpointIP(n: number): string {
  if (!Number.isInteger(n) || n < 0 || n > 0xffff) {
    throw new RangeError(`cannot use extra endpoint ${n}: must be 0-65535`);
  }
  return ipv4(EXTRA_ENDPOINT_BASE + n);
}

/** A copy of `slice` with one more ready endpoint at `ip` on node `nodeName` (default node-1). */
export function withExtraEndpoint(
  slice: RawObject,
  ip: string,
  options: { nodeName?: string } = {},
): RawObject {
  const endpoints = Array.isArray(slice.endpoints) ? slice.endpoints : [];
  return {
    ...slice,
    endpoints: [
      ...endpoints,
      {
        addresses: [ip],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: options.nodeName ?? "node-1",
      },
    ],
  };
}

function checkSizes(services: number, endpoints: number, mix: Required<ServiceMix>): void {
  if (!Number.isInteger(services) || services < 1 || services > SERVICE_OFFSETS) {
    throw new RangeError(`cannot generate ${services} services: must be 1-${SERVICE_OFFSETS}`);
  }
  if (!Number.isInteger(endpoints) || endpoints < 0 || endpoints > 1000) {
    throw new RangeError(`cannot generate ${endpoints} endpoints per service: must be 0-1000`);
  }
  for (const [feature, share] of Object.entries(mix)) {
    if (!(share >= 0 && share <= 1)) {
      throw new RangeError(`cannot use mix.${feature} ${share}: must be a share 0-1`);
    }
  }
  if (mix.nodePort + mix.loadBalancer > 1) {
    throw new RangeError("cannot use mix.nodePort + mix.loadBalancer above 1");
  }
}

/** A small, fast, seedable PRNG (mulberry32): deterministic numbers in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An IPv4 address from its 32-bit number. */
function ipv4(n: number): string {
  return ipaddr.fromByteArray([n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255]).toString();
}
