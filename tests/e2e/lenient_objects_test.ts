/**
 * Services and EndpointSlices the API server stored before its validation became strict (IPs
 * with leading zeros, a bad `externalIPs` or `loadBalancerSourceRanges` entry), in both modes:
 * like upstream, the proxy skips only the bad entries and keeps serving the rest. Refusing such a
 * Service whole put its cluster IP among the unallocated ones in the service CIDR, which are
 * dropped, and its clients timed out.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy } from "./proxy_harness.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import { NODE_NAME, SERVICE_CIDR_V4 } from "../fixtures/ip_plan.ts";
import type { RawObject } from "../../src/source/events.ts";

const gate = await netnsTestGate();

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

function cluster(topo: Topology): RawObject[] {
  const [a, b] = topo.pods;
  return [
    node(NODE_NAME, { ips: [topo.node.ip4] }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4]),
    // A bad external IP and a bad source range next to good ones.
    service({
      name: "web",
      clusterIPs: ["10.96.0.10"],
      spec: { externalIPs: ["203.0.113.300", "203.0.113.010"] },
    }),
    endpointSlice({ name: "web-1", service: "web", endpoints: [a.ip4, b.ip4] }),
    // Leading zeros in the cluster IP, and in an endpoint's address.
    service({ name: "zeros", clusterIPs: ["010.096.000.011"] }),
    endpointSlice({
      name: "zeros-1",
      service: "zeros",
      endpoints: [a.ip4.replace(/\.(\d+)$/, ".0$1")],
    }),
    service({
      name: "lb",
      type: "LoadBalancer",
      clusterIPs: ["10.96.0.12"],
      ports: [{ name: "http", port: 80, nodePort: 30090 }],
      spec: { loadBalancerSourceRanges: ["192.168.77.0/24", "not-a-range"] },
      status: { loadBalancer: { ingress: [{ ip: "203.0.113.20" }] } },
    }),
    endpointSlice({ name: "lb-1", service: "lb", endpoints: [b.ip4] }),
  ];
}

async function check(topo: Topology, proxy: RunningProxy): Promise<void> {
  const [a, b] = topo.pods;
  const cases: [string, string[]][] = [
    ["10.96.0.10:80", [a.name, b.name]],
    ["203.0.113.10:80", [a.name, b.name]],
    ["10.96.0.11:80", [a.name]],
    ["10.96.0.12:80", [b.name]],
    ["203.0.113.20:80", [b.name]],
  ];
  for (const [target, pods] of cases) {
    const reached = (await probe(topo, topo.client.ns, target, { count: 6 }))
      .map((r) => r.outcome === "ok" ? r.body : r.outcome);
    assert.ok(reached.every((body) => pods.includes(body)), `${target}: ${reached.join()}`);
  }
  const log = proxy.output();
  assert.match(
    log,
    // klog quotes the message: its double quotes are escaped.
    /ignoring part of Service default\/web: spec\.externalIPs\[0\] \\"203\.0\.113\.300\\"/,
  );
  assert.match(log, /ignoring part of Service default\/lb: spec\.loadBalancerSourceRanges\[1\]/);
  assert.doesNotMatch(log, /cannot use Service/);
}

for (const mode of ["nft", "iptables"] as const) {
  test(`${mode} mode: a Service with bad or old-style fields keeps serving what is usable`, async () => {
    gate.assertUsable();
    const topo = await createTopology({ pods: ["pod-a", "pod-b"], ipv6: false });
    try {
      const objects = cluster(topo);
      const proxy = mode === "nft"
        ? await startProxy(topo, objects)
        : await startIptablesProxy(topo, objects);
      try {
        await check(topo, proxy);
      } finally {
        await proxy.stop();
      }
    } finally {
      await topo.cleanup();
    }
  });
}
