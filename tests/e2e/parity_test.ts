/**
 * Behaviours where kube-proxy and we once differed, as packet-flow rows run in both modes
 * (nft, and iptables through iptables-nft): what a cluster switching from kube-proxy relies on.
 *
 * - Dual-stack `loadBalancerSourceRanges`: each family's ranges guard that family's
 *   load-balancer IPs, and a family without ranges stays open (upstream filters the ranges per
 *   family in `newBaseServiceInfo` and firewalls a family only when it has some).
 * - ClientIP affinity holds per service port, whichever entry point the client uses: a client
 *   that reached an endpoint through the cluster IP reaches it through the load-balancer IP and
 *   the node port too (upstream keeps one set of clients per endpoint of the service port).
 * - Node ports answer where upstream's do (`NodePortAddresses`): on every local address, even
 *   one added after the last sync (a keepalived or MetalLB VIP), in iptables mode by default and
 *   in nft mode with `0.0.0.0/0` / `::/0`; on the primary IPs in nft mode by default; and on
 *   every local address while no node IP is known, never nowhere.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy } from "./proxy_harness.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import {
  NODE_CLIENT_IFACE,
  NODE_NAME,
  SERVICE_CIDR_V4,
  SERVICE_CIDR_V6,
} from "../fixtures/ip_plan.ts";
import type { RawObject } from "../../src/source/events.ts";
import { checkAll, type FlowCase } from "./semantics_cases.ts";

const gate = await netnsTestGate();

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

/** Addresses of the parity cluster's services. */
const ADDR = {
  lbOpen: ["10.96.0.40", "fd00:10:96::40"],
  lbOpenIP: ["203.0.113.40", "fd00:203::40"],
  lbDenied: ["10.96.0.41", "fd00:10:96::41"],
  lbDeniedIP: ["203.0.113.41", "fd00:203::41"],
  sticky: ["10.96.0.42", "fd00:10:96::42"],
  /** Per family: two load-balancer IPs and an external IP. */
  stickyEntries: [["203.0.113.42", "203.0.113.44", "203.0.113.43"], [
    "fd00:203::42",
    "fd00:203::44",
    "fd00:203::43",
  ]],
} as const;

/** The sticky Service's node port. */
const STICKY_NODE_PORT = 30142;

/** A plain NodePort Service's node port, and the VIP added to the node's client link. */
const NODE_PORT = 30143;
const VIP = ["192.168.77.50", "fd00:77::50"] as const;

/** A dual-stack Service with endpoints on pod-a and pod-b (or `pods`) in both families. */
function dualStack(
  topo: Topology,
  name: string,
  clusterIPs: readonly string[],
  extra: {
    type?: "LoadBalancer";
    spec?: Record<string, unknown>;
    lbIPs?: readonly string[];
    nodePort?: number;
    pods?: number;
  },
): RawObject[] {
  const pods = topo.pods.slice(0, extra.pods ?? 2);
  return [
    service({
      name,
      type: extra.type,
      clusterIPs: [...clusterIPs],
      ...(extra.nodePort ? { ports: [{ name: "http", port: 80, nodePort: extra.nodePort }] } : {}),
      spec: { ipFamilyPolicy: "RequireDualStack", ...extra.spec },
      ...(extra.lbIPs
        ? { status: { loadBalancer: { ingress: extra.lbIPs.map((ip) => ({ ip })) } } }
        : {}),
    }),
    endpointSlice({ name: `${name}-4`, service: name, endpoints: pods.map((p) => p.ip4) }),
    endpointSlice({
      name: `${name}-6`,
      service: name,
      addressType: "IPv6",
      endpoints: pods.map((p) => p.ip6!),
    }),
  ];
}

function parityCluster(topo: Topology): RawObject[] {
  return [
    node(NODE_NAME, { ips: [topo.node.ip4, topo.node.ip6!] }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
    // IPv4 ranges only: the client's IPv4 range is allowed, IPv6 has no ranges.
    ...dualStack(topo, "lb-open", ADDR.lbOpen, {
      type: "LoadBalancer",
      spec: { loadBalancerSourceRanges: ["192.168.77.0/24"] },
      lbIPs: ADDR.lbOpenIP,
    }),
    // IPv4 ranges only, none holding the client.
    ...dualStack(topo, "lb-denied", ADDR.lbDenied, {
      type: "LoadBalancer",
      spec: { loadBalancerSourceRanges: ["198.51.100.0/24"] },
      lbIPs: ADDR.lbDeniedIP,
    }),
    ...nodePortService(topo),
    ...dualStack(topo, "sticky", ADDR.sticky, {
      type: "LoadBalancer",
      spec: {
        sessionAffinity: "ClientIP",
        externalIPs: [ADDR.stickyEntries[0][2], ADDR.stickyEntries[1][2]],
      },
      lbIPs: [...ADDR.stickyEntries[0].slice(0, 2), ...ADDR.stickyEntries[1].slice(0, 2)],
      nodePort: STICKY_NODE_PORT,
      pods: 3,
    }),
  ];
}

/** A dual-stack NodePort Service on pod-a and pod-b. */
function nodePortService(topo: Topology): RawObject[] {
  const objects = dualStack(topo, "np", ["10.96.0.45", "fd00:10:96::45"], {});
  const svc = objects[0] as { spec: Record<string, unknown> };
  svc.spec.type = "NodePort";
  svc.spec.ports = [{
    name: "http",
    port: 80,
    targetPort: 80,
    protocol: "TCP",
    nodePort: NODE_PORT,
  }];
  return objects;
}

/** Adds the VIPs to the node's client link (after the proxy's last sync). */
async function addVIPs(topo: Topology): Promise<void> {
  for (
    const cmd of [
      ["ip", "addr", "add", `${VIP[0]}/32`, "dev", NODE_CLIENT_IFACE],
      ["ip", "addr", "add", `${VIP[1]}/128`, "dev", NODE_CLIENT_IFACE, "nodad"],
    ]
  ) {
    const result = await topo.exec(topo.node.ns, cmd);
    assert.equal(result.code, 0, result.stderr);
  }
}

/** Node-port rows: the primary IPs, and the VIPs reached (or refused) as `onVIP` says. */
function nodePortCases(topo: Topology, onVIP: "reach" | "refused"): FlowCase[] {
  const both = ["pod-a", "pod-b"];
  const vip = onVIP === "reach" ? { reach: both } : { outcome: "refused" as const };
  return [
    {
      name: "node port on the primary IPv4",
      from: "client",
      to: `${topo.node.ip4}:${NODE_PORT}`,
      expect: { reach: both },
    },
    {
      name: "node port on the primary IPv6",
      from: "client",
      to: `[${topo.node.ip6}]:${NODE_PORT}`,
      expect: { reach: both },
    },
    {
      name: `node port on an IPv4 VIP: ${onVIP}`,
      from: "client",
      to: `${VIP[0]}:${NODE_PORT}`,
      expect: vip,
    },
    {
      name: `node port on an IPv6 VIP: ${onVIP}`,
      from: "client",
      to: `[${VIP[1]}]:${NODE_PORT}`,
      expect: vip,
    },
  ];
}

/**
 * The client reaches the sticky Service through its cluster IP, then through every other
 * entry point of the same family: always the endpoint it got first.
 */
async function checkAffinityAcrossEntries(topo: Topology): Promise<void> {
  const families = [
    { at: (ip: string) => `${ip}:80`, node: `${topo.node.ip4}:${STICKY_NODE_PORT}`, i: 0 },
    { at: (ip: string) => `[${ip}]:80`, node: `[${topo.node.ip6}]:${STICKY_NODE_PORT}`, i: 1 },
  ];
  const failures: string[] = [];
  for (const { at, node, i } of families) {
    const [first] = await probe(topo, topo.client.ns, at(ADDR.sticky[i]));
    assert.equal(first.outcome, "ok", JSON.stringify(first));
    const stuck = first.outcome === "ok" ? first.body : "";
    for (const target of [...ADDR.stickyEntries[i].map(at), node, at(ADDR.sticky[i])]) {
      const seen = (await probe(topo, topo.client.ns, target, { count: 4 }))
        .map((r) => r.outcome === "ok" ? r.body : r.outcome);
      if (seen.some((body) => body !== stuck)) {
        failures.push(`${target}: ${seen.join()} (the cluster IP gave ${stuck})`);
      }
    }
  }
  assert.deepEqual(failures, [], failures.join("\n"));
}

function parityCases(): FlowCase[] {
  const both = ["pod-a", "pod-b"];
  return [
    {
      name: "IPv4 LB IP: the client is inside the IPv4 source ranges",
      from: "client",
      to: `${ADDR.lbOpenIP[0]}:80`,
      expect: { reach: both },
    },
    {
      name: "IPv6 LB IP: no IPv6 source ranges, so open",
      from: "client",
      to: `[${ADDR.lbOpenIP[1]}]:80`,
      expect: { reach: both },
    },
    {
      name: "IPv4 LB IP: the client is outside every IPv4 source range",
      from: "client",
      to: `${ADDR.lbDeniedIP[0]}:80`,
      expect: { outcome: "dropped" },
    },
    {
      name: "IPv6 LB IP of the same Service: IPv4 ranges do not close it",
      from: "client",
      to: `[${ADDR.lbDeniedIP[1]}]:80`,
      expect: { reach: both },
    },
  ];
}

async function withMode(
  mode: "nft" | "iptables",
  fn: (topo: Topology, proxy: RunningProxy) => Promise<void>,
  options: { args?: string[]; withoutNode?: boolean } = {},
): Promise<void> {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const objects = parityCluster(topo).filter((o) => !options.withoutNode || o.kind !== "Node");
    const proxy = mode === "nft"
      ? await startProxy(topo, objects, { args: options.args })
      : await startIptablesProxy(topo, objects, { args: options.args });
    try {
      await fn(topo, proxy);
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
}

for (const mode of ["nft", "iptables"] as const) {
  test(`${mode} mode: behaves as kube-proxy where we once differed`, () =>
    withMode(mode, async (topo) => {
      await checkAll(topo, parityCases());
      await checkAffinityAcrossEntries(topo);
    }));

  test(`${mode} mode: node ports answer on every local address when no node IP is known`, () =>
    withMode(mode, async (topo) => {
      await addVIPs(topo);
      await checkAll(topo, nodePortCases(topo, "reach"));
    }, { withoutNode: true }));
}

test("iptables mode: node ports answer on every local address by default, as kube-proxy's", () =>
  withMode("iptables", async (topo) => {
    await addVIPs(topo);
    await checkAll(topo, nodePortCases(topo, "reach"));
  }));

test("nft mode: node ports answer on the primary IPs only by default, as kube-proxy's", () =>
  withMode("nft", async (topo) => {
    await addVIPs(topo);
    await checkAll(topo, nodePortCases(topo, "refused"));
  }));

test("nft mode: nodePortAddresses 0.0.0.0/0,::/0 means every local address, a new VIP too", () =>
  withMode("nft", async (topo) => {
    await addVIPs(topo);
    await checkAll(topo, nodePortCases(topo, "reach"));
  }, { args: ["--nodeport-addresses=0.0.0.0/0,::/0"] }));
