/**
 * Upstream kube-proxy's nftables tables on the node: our proxy removes them once its own rules
 * are in place (as upstream removes every other mode's rules at start), and `--cleanup` removes
 * them too. Left in place, their `service-endpoints-check` keeps rejecting a Service that had no
 * endpoints when kube-proxy stopped, and their nat chains keep DNATing to gone pods.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { cacheProxyDependencies, MAIN, startProxy } from "./proxy_harness.ts";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import { upstreamNftScript } from "../fixtures/upstream_nft.ts";
import {
  NODE_NAME,
  POD_CIDR_V4,
  POD_CIDR_V6,
  SERVICE_CIDR_V4,
  SERVICE_CIDR_V6,
} from "../fixtures/ip_plan.ts";

const gate = await netnsTestGate();

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

/** What kube-proxy left: `web` without endpoints (rejected), `moved` at a pod that is gone. */
async function loadUpstreamTables(topo: Topology): Promise<void> {
  for (
    const script of [
      upstreamNftScript({
        family: "ip",
        serviceCIDRs: [SERVICE_CIDR_V4],
        clusterCIDR: POD_CIDR_V4,
        services: [
          { name: "web", portName: "http", clusterIP: "10.96.0.10", port: 80, endpoints: [] },
          {
            name: "moved",
            portName: "http",
            clusterIP: "10.96.0.11",
            port: 80,
            endpoints: ["10.244.1.99:8080"],
          },
        ],
      }),
      upstreamNftScript({
        family: "ip6",
        serviceCIDRs: [SERVICE_CIDR_V6],
        clusterCIDR: POD_CIDR_V6,
        services: [{
          name: "web",
          portName: "http",
          clusterIP: "fd00:10:96::10",
          port: 80,
          endpoints: [],
        }],
      }),
    ]
  ) {
    const loaded = await topo.exec(topo.node.ns, ["nft", "-f", "-"], { stdin: script });
    assert.equal(loaded.code, 0, loaded.stderr);
  }
}

async function tables(topo: Topology): Promise<string> {
  return (await topo.exec(topo.node.ns, ["nft", "list", "tables"])).stdout;
}

test("kube-proxy's nftables tables: removed after our first sync, its stale verdicts gone", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    await loadUpstreamTables(topo);
    const pods = topo.pods.slice(0, 2);
    const proxy = await startProxy(topo, [
      node(NODE_NAME, { ips: [topo.node.ip4] }),
      service({ name: "web", clusterIPs: ["10.96.0.10", "fd00:10:96::10"] }),
      endpointSlice({ name: "web-4", service: "web", endpoints: pods.map((p) => p.ip4) }),
      endpointSlice({
        name: "web-6",
        service: "web",
        addressType: "IPv6",
        endpoints: pods.map((p) => p.ip6!),
      }),
      service({ name: "moved", clusterIPs: ["10.96.0.11"] }),
      endpointSlice({ name: "moved-4", service: "moved", endpoints: [topo.pods[2].ip4] }),
    ]);
    try {
      // The tables go right after the first sync; the probes below fail if they stay.
      await proxy.process.waitForOutput(/removed kube-proxy's nftables tables/).catch(() => {});
      const reached = async (target: string) =>
        (await probe(topo, topo.client.ns, target, { count: 8 }))
          .map((r) => r.outcome === "ok" ? r.body : r.outcome);
      for (const body of await reached("10.96.0.10:80")) assert.ok(body.startsWith("pod-"), body);
      for (const body of await reached("[fd00:10:96::10]:80")) {
        assert.ok(body.startsWith("pod-"), body);
      }
      assert.deepEqual(new Set(await reached("10.96.0.11:80")), new Set([topo.pods[2].name]));
      assert.doesNotMatch(await tables(topo), /table ip6? kube-proxy\n/);
      assert.match(
        proxy.output(),
        /removed kube-proxy's nftables tables .*\(ip kube-proxy, ip6 kube-proxy\)/,
      );
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
});

test("--cleanup removes kube-proxy's nftables tables as well as ours", async () => {
  gate.assertUsable();
  const topo = await createTopology({ pods: ["pod-a"] });
  try {
    await cacheProxyDependencies();
    await loadUpstreamTables(topo);
    await topo.exec(topo.node.ns, ["nft", "add", "table", "ip", "kube-nftproxy"]);
    const other = await topo.exec(topo.node.ns, ["nft", "add", "table", "ip", "someone-else"]);
    assert.equal(other.code, 0, other.stderr);
    const cleanup = await topo.exec(topo.node.ns, [
      Deno.execPath(),
      "run",
      "--cached-only",
      "-A",
      MAIN,
      "--cleanup",
    ], { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" }, timeoutMs: 30_000 });
    assert.equal(cleanup.code, 0, cleanup.stderr);
    assert.match(cleanup.stderr, /removed kube-proxy's nftables tables/);
    assert.equal(await tables(topo), "table ip someone-else\n");
  } finally {
    await topo.cleanup();
  }
});
