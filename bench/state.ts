/**
 * The proxy pieces a benchmark drives, built only through the public pipeline API: the
 * configuration for a synthetic cluster and a {@link ProxyState} fed with its raw objects.
 *
 * Pure (no I/O), so both the microbenchmarks and the scale runs use it.
 *
 * @module
 */
import { type Config, DEFAULT_CONFIG } from "../src/config/config.ts";
import type { ObjectEvent } from "../src/source/events.ts";
import { ProxyState } from "../src/tracker/proxy_state.ts";
import { BENCH_POD_CIDR, type SyntheticCluster } from "./cluster.ts";
import { endpointSlice, service } from "../tests/fixtures/objects.ts";
import { POD_PORT } from "../tests/fixtures/ip_plan.ts";
import type { Topology } from "../tests/netns/topology.ts";

/** The service every data-plane measurement connects to. */
export const TARGET_IP = "10.96.0.10";
/** Its port. */
export const TARGET_PORT = 80;

/**
 * The hand-made service the data-plane rounds connect to: the topology's pods behind
 * {@link TARGET_IP}:{@link TARGET_PORT}, in `namespace` (its key decides where it sorts).
 */
export function targetObjects(topo: Topology, namespace = "bench"): ObjectEvent[] {
  return [
    {
      kind: "Service",
      current: service({
        namespace,
        name: "target",
        clusterIPs: [TARGET_IP],
        ports: [{ name: "http", port: TARGET_PORT, targetPort: POD_PORT }],
      }),
    },
    {
      kind: "EndpointSlice",
      current: endpointSlice({
        namespace,
        name: "target-0",
        service: "target",
        ports: [{ name: "http", port: POD_PORT }],
        endpoints: topo.pods.map((p) => ({ ip: p.ip4, nodeName: topo.node.name })),
      }),
    },
  ];
}

/** The configuration a proxy on the synthetic cluster's node would run with. */
export function benchConfig(cluster: SyntheticCluster, overrides: Partial<Config> = {}): Config {
  return {
    ...DEFAULT_CONFIG,
    hostname: cluster.nodeName,
    clusterCIDRs: [BENCH_POD_CIDR],
    ...overrides,
  };
}

/** Options of {@link loadState}. */
export interface LoadStateOptions {
  /** Receives each line the state logs (refused objects). Default: collected and thrown. */
  log?: (line: string) => void;
}

/**
 * A {@link ProxyState} for `hostname` fed with `events` and marked synced; its pending changes
 * are left for the caller's first `takeChanges()` (the first sync). Throws when an object was
 * refused, unless `log` is given: a benchmark over refused objects measures nothing.
 */
export function loadState(
  hostname: string,
  events: readonly ObjectEvent[],
  options: LoadStateOptions = {},
): ProxyState {
  const refused: string[] = [];
  const state = new ProxyState({ hostname, log: options.log ?? ((line) => refused.push(line)) });
  for (const event of events) state.onEvent(event);
  state.onSynced();
  if (refused.length > 0) {
    throw new Error(`the synthetic cluster has refused objects: ${refused.slice(0, 3).join("; ")}`);
  }
  return state;
}
