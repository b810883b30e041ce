/**
 * The data-plane semantics cases, shared by both back ends' suites: one table of packet flows
 * (from an off-cluster client, a local pod or the node) and the check that runs one against a
 * kernel.
 *
 * @module
 */
import assert from "node:assert/strict";
import { NODE_POD_GATEWAY_V4, NODE_POD_GATEWAY_V6 } from "../fixtures/ip_plan.ts";
import { probe, type Topology } from "../netns/topology.ts";
import { ADDR, NODE_PORTS } from "./semantics_cluster.ts";

/** Who sends: the off-cluster client, a pod on this node, or the node itself. */
export type From = "client" | "pod-b" | "node";

/** What must happen. */
type Expect =
  | { reach: string[]; source?: "masqueraded" | "preserved"; sticky?: boolean }
  | { outcome: "refused" | "dropped" };

/** One packet-flow case. */
export interface FlowCase {
  name: string;
  from: From;
  to: string;
  proto?: "tcp" | "udp";
  expect: Expect;
}

const v6 = (ip: string, port: number) => `[${ip}]:${port}`;

/** Largest chance we accept that a correct spread of connections is reported as broken. */
const MISS_PROBABILITY = 1e-10;

/**
 * How many connections to make so that, spread uniformly over `n` endpoints, every endpoint
 * is reached except with a probability below 1e-10 (union bound: n·(1 − 1/n)^count).
 *
 * @example
 * ```ts
 * probesToReachAll(3); // 60
 * ```
 */
export function probesToReachAll(n: number): number {
  if (n <= 1) return 1;
  return Math.ceil(Math.log(MISS_PROBABILITY / n) / Math.log(1 - 1 / n));
}

/** Every behaviour of DESIGN.md §4 that a one-node topology can show, in IPv4 and IPv6. */
export function flowCases(topo: Topology): FlowCase[] {
  const nodeIP = topo.node.ip4;
  return [
    {
      name: "ClusterIP spreads TCP over all endpoints, masquerading an off-cluster client",
      from: "client",
      to: `${ADDR.web}:80`,
      expect: { reach: ["pod-a", "pod-b", "pod-c"], source: "masqueraded" },
    },
    {
      name: "ClusterIP serves UDP on the same port number",
      from: "client",
      to: `${ADDR.web}:80`,
      proto: "udp",
      expect: { reach: ["pod-a", "pod-b", "pod-c"] },
    },
    {
      name: "IPv6 ClusterIP spreads over the IPv6 endpoints, masquerading",
      from: "client",
      to: v6(ADDR.web6, 80),
      expect: { reach: ["pod-a", "pod-b", "pod-c"], source: "masqueraded" },
    },
    {
      name: "a pod reaches a ClusterIP",
      from: "pod-b",
      to: `${ADDR.web}:80`,
      expect: { reach: ["pod-a", "pod-b", "pod-c"] },
    },
    {
      name: "the node itself reaches a ClusterIP",
      from: "node",
      to: `${ADDR.web}:80`,
      expect: { reach: ["pod-a", "pod-b", "pod-c"] },
    },
    {
      name: "a pod keeps its source address on a ClusterIP",
      from: "pod-b",
      to: `${ADDR.internalLocal}:80`,
      expect: { reach: ["pod-a"], source: "preserved" },
    },
    {
      name: "a service without endpoints is refused",
      from: "client",
      to: `${ADDR.empty}:80`,
      expect: { outcome: "refused" },
    },
    {
      name: "a ClusterIP on a port no service uses is refused",
      from: "client",
      to: `${ADDR.web}:81`,
      expect: { outcome: "refused" },
    },
    {
      name: "the node's own connection to an unused ClusterIP port is refused",
      from: "node",
      to: `${ADDR.web}:81`,
      expect: { outcome: "refused" },
    },
    {
      name: "an unallocated IP in the service CIDR is dropped",
      from: "client",
      to: `${ADDR.unallocated}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "a Service labelled for another proxy is ignored",
      from: "client",
      to: `${ADDR.foreign}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "NodePort on the node's primary IP, masquerading",
      from: "client",
      to: `${nodeIP}:${NODE_PORTS.nodePort}`,
      expect: { reach: ["pod-a", "pod-b"], source: "masqueraded" },
    },
    {
      name: "NodePort on the node's primary IPv6",
      from: "client",
      to: v6(topo.node.ip6!, NODE_PORTS.nodePort),
      expect: { reach: ["pod-a", "pod-b"], source: "masqueraded" },
    },
    {
      name: "NodePort from the node itself",
      from: "node",
      to: `${nodeIP}:${NODE_PORTS.nodePort}`,
      expect: { reach: ["pod-a", "pod-b"] },
    },
    {
      name: "NodePort is never served on 127.0.0.1",
      from: "node",
      to: `127.0.0.1:${NODE_PORTS.nodePort}`,
      expect: { outcome: "refused" },
    },
    {
      name: "a NodePort nobody uses is not served on the node IP",
      from: "client",
      to: `${nodeIP}:30999`,
      expect: { outcome: "refused" },
    },
    {
      name: "eTP Local: external clients reach only local endpoints, source preserved",
      from: "client",
      to: `${nodeIP}:${NODE_PORTS.nodePortLocal}`,
      expect: { reach: ["pod-a"], source: "preserved" },
    },
    {
      name: "eTP Local: pods short-circuit to all endpoints",
      from: "pod-b",
      to: `${nodeIP}:${NODE_PORTS.nodePortLocal}`,
      expect: { reach: ["pod-a", "pod-c"] },
    },
    {
      name: "eTP Local: the node short-circuits to all endpoints",
      from: "node",
      to: `${nodeIP}:${NODE_PORTS.nodePortLocal}`,
      expect: { reach: ["pod-a", "pod-c"] },
    },
    {
      name: "eTP Local without a local endpoint drops external clients",
      from: "client",
      to: `${nodeIP}:${NODE_PORTS.nodePortLocalNone}`,
      expect: { outcome: "dropped" },
    },
    {
      name: "eTP Local without a local endpoint still serves pods",
      from: "pod-b",
      to: `${nodeIP}:${NODE_PORTS.nodePortLocalNone}`,
      expect: { reach: ["pod-c"] },
    },
    {
      name: "externalIPs are served, masquerading",
      from: "client",
      to: `${ADDR.externalIP}:80`,
      expect: { reach: ["pod-a", "pod-b"], source: "masqueraded" },
    },
    {
      name: "LoadBalancer ingress IP inside loadBalancerSourceRanges (with stray spaces)",
      from: "client",
      to: `${ADDR.lbIP}:80`,
      expect: { reach: ["pod-a", "pod-b"] },
    },
    {
      name: "LoadBalancer NodePort is not limited by loadBalancerSourceRanges",
      from: "client",
      to: `${nodeIP}:${NODE_PORTS.lb}`,
      expect: { reach: ["pod-a", "pod-b"] },
    },
    {
      name: "LoadBalancer ingress IP from outside loadBalancerSourceRanges is dropped",
      from: "client",
      to: `${ADDR.lbDeniedIP}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "the ClusterIP of a source-ranged LoadBalancer is not limited",
      from: "client",
      to: `${ADDR.lbDenied}:80`,
      expect: { reach: ["pod-a", "pod-b"] },
    },
    {
      name: "an ingress IP with ipMode Proxy gets no rules",
      from: "client",
      to: `${ADDR.lbProxyIP}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "ClientIP affinity keeps a client on one endpoint",
      from: "client",
      to: `${ADDR.sticky}:80`,
      expect: { reach: ["pod-a", "pod-b", "pod-c"], sticky: true },
    },
    {
      name: "iTP Local sends cluster traffic to local endpoints only",
      from: "pod-b",
      to: `${ADDR.internalLocal}:80`,
      expect: { reach: ["pod-a"] },
    },
    {
      name: "iTP Local without a local endpoint drops",
      from: "pod-b",
      to: `${ADDR.internalLocalNone}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "with no ready endpoint, serving-and-terminating ones take traffic",
      from: "client",
      to: `${ADDR.terminating}:80`,
      expect: { reach: ["pod-a"] },
    },
    {
      name: "zone hints keep traffic in the node's zone",
      from: "client",
      to: `${ADDR.zoned}:80`,
      expect: { reach: ["pod-a"] },
    },
    {
      name: "zone hints are ignored unless every endpoint has them",
      from: "client",
      to: `${ADDR.zonedPartly}:80`,
      expect: { reach: ["pod-a", "pod-b"] },
    },
    // The same behaviours over IPv6 (the ip6 table, programmed from the same state).
    {
      name: "IPv6: a service without endpoints is refused",
      from: "client",
      to: v6(ADDR.empty6, 80),
      expect: { outcome: "refused" },
    },
    {
      name: "IPv6: an unallocated IP in the service CIDR is dropped",
      from: "client",
      to: v6(ADDR.unallocated6, 80),
      expect: { outcome: "dropped" },
    },
    {
      name: "IPv6: a pod reaches a ClusterIP over UDP",
      from: "pod-b",
      to: v6(ADDR.web6, 80),
      proto: "udp",
      expect: { reach: ["pod-a", "pod-b", "pod-c"] },
    },
    {
      name: "IPv6: eTP Local keeps external clients on local endpoints, source preserved",
      from: "client",
      to: v6(topo.node.ip6!, NODE_PORTS.nodePortLocal),
      expect: { reach: ["pod-a"], source: "preserved" },
    },
    {
      name: "IPv6: eTP Local short-circuits pods to all endpoints",
      from: "pod-b",
      to: v6(topo.node.ip6!, NODE_PORTS.nodePortLocal),
      expect: { reach: ["pod-a", "pod-c"] },
    },
    {
      name: "IPv6: ClientIP affinity keeps a client on one endpoint",
      from: "client",
      to: v6(ADDR.sticky6, 80),
      expect: { reach: ["pod-a", "pod-b", "pod-c"], sticky: true },
    },
  ];
}

function nsOf(topo: Topology, from: From): string {
  if (from === "client") return topo.client.ns;
  if (from === "node") return topo.node.ns;
  return topo.pods.find((p) => p.name === from)!.ns;
}

function sourceIPOf(topo: Topology, from: From, ipv6: boolean): string {
  if (from === "client") return ipv6 ? topo.client.ip6! : topo.client.ip4;
  const pod = topo.pods.find((p) => p.name === from)!;
  return ipv6 ? pod.ip6! : pod.ip4;
}

/** Checks one case against the kernel; throws with the case name on a mismatch. */
export async function checkFlow(topo: Topology, c: FlowCase): Promise<void> {
  const ns = nsOf(topo, c.from);
  const proto = c.proto ?? "tcp";
  const ipv6 = c.to.startsWith("[");
  if ("outcome" in c.expect) {
    const results = await probe(topo, ns, c.to, {
      proto,
      count: 2,
      timeoutMs: c.expect.outcome === "dropped" ? 400 : 2000,
    });
    const want = c.expect.outcome === "dropped" ? "timeout" : "refused";
    assert.deepEqual(
      results.map((r) => r.outcome),
      [want, want],
      `${c.name}: ${JSON.stringify(results)}`,
    );
    return;
  }
  const results = await probe(topo, ns, c.to, {
    proto,
    // Sticky: every connection must land on one endpoint, however many are made.
    count: c.expect.sticky ? 20 : probesToReachAll(c.expect.reach.length),
    timeoutMs: 2000,
  });
  const seen = results.map((r) => r.outcome === "ok" ? r.body : r.outcome);
  if (c.expect.sticky) {
    assert.equal(new Set(seen).size, 1, `${c.name}: ${seen.join()}`);
    assert.ok(c.expect.reach.includes(seen[0]), `${c.name}: ${seen[0]}`);
  } else {
    assert.deepEqual(
      [...new Set(seen)].sort(),
      [...c.expect.reach].sort(),
      `${c.name}: ${seen.join()}`,
    );
  }
  if (c.expect.source) {
    const sources = (await probe(topo, ns, c.to, { proto, count: 4, ask: "client" }))
      .map((r) => r.outcome === "ok" ? r.body : r.outcome);
    const gateway = ipv6 ? `[${NODE_POD_GATEWAY_V6}]:` : `${NODE_POD_GATEWAY_V4}:`;
    const own = ipv6
      ? `[${sourceIPOf(topo, c.from, true)}]:`
      : `${sourceIPOf(topo, c.from, false)}:`;
    const prefix = c.expect.source === "masqueraded" ? gateway : own;
    assert.ok(
      sources.every((s) => s.startsWith(prefix)),
      `${c.name}: sources ${sources.join()}, want ${prefix}…`,
    );
  }
}

/** Runs every case; collects all failures so one run shows every broken behaviour. */
export async function checkAll(topo: Topology, cases: FlowCase[]): Promise<void> {
  const failures: string[] = [];
  for (const c of cases) {
    try {
      await checkFlow(topo, c);
    } catch (err) {
      failures.push(`✗ ${(err as Error).message}`);
    }
  }
  assert.equal(failures.length, 0, `\n${failures.join("\n")}`);
}

/** The masquerade check used by every detect-local variant: a ClusterIP with one local pod. */
export function masqueradeCase(from: From, source: "masqueraded" | "preserved"): FlowCase {
  return {
    name: `${from} → a ClusterIP is ${source}`,
    from,
    to: `${ADDR.internalLocal}:80`,
    expect: { reach: ["pod-a"], source },
  };
}

/** Local-traffic detectors other than the default, with the flags that select them. */
export const DETECT_LOCAL_VARIANTS: readonly (readonly [string, readonly string[]])[] = [
  ["NodeCIDR", ["--detect-local-mode=NodeCIDR"]],
  ["BridgeInterface", ["--detect-local-mode=BridgeInterface", "--pod-bridge-interface=knp-br0"]],
  ["InterfaceNamePrefix", [
    "--detect-local-mode=InterfaceNamePrefix",
    "--pod-interface-name-prefix=knp-br",
  ]],
];
