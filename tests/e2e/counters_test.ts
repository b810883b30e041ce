/**
 * Data-plane spec of the per-service connection counters: the real proxy programs a node
 * namespace, an off-cluster client opens N new connections to a service (cluster IP and node
 * port), and the counters the kernel keeps on the dispatch-map elements grow by exactly N, as
 * read by the collector and as the proxy's `/metrics` reports them.
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import { POD_PORT, SERVICE_CIDR_V4, SERVICE_CIDR_V6 } from "../fixtures/ip_plan.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { startProxy } from "./proxy_harness.ts";
import {
  nftServiceCounterReader,
  type ServiceConnections,
  ServiceCounters,
} from "../../src/apply/service_counters.ts";
import type { RawObject } from "../../src/source/events.ts";

const gate = await netnsTestGate();

const WEB_V4 = "10.96.0.10";
const OTHER_V4 = "10.96.0.20";
const NODE_PORT = 30080;
const METRICS = "http://127.0.0.1:10249/metrics";

function cluster(topo: Topology): RawObject[] {
  const ports = [{ name: "http", port: POD_PORT }];
  const endpoints = topo.pods.map((p) => p.ip4);
  return [
    node("node-a", { ips: [topo.node.ip4] }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
    service({
      name: "web",
      type: "NodePort",
      clusterIPs: [WEB_V4],
      ports: [{ name: "http", port: 80, targetPort: POD_PORT, nodePort: NODE_PORT }],
    }),
    endpointSlice({ name: "web-v4", service: "web", ports, endpoints }),
    service({ name: "other", clusterIPs: [OTHER_V4] }),
    endpointSlice({ name: "other-v4", service: "other", ports, endpoints }),
  ];
}

function connectionsOf(totals: readonly ServiceConnections[], service: string): number {
  return totals.find((t) => t.namespace === "default" && t.service === service)?.connections ??
    0;
}

/** The proxy's `/metrics` inside the node namespace (curl, bounded by `--max-time`). */
async function scrape(ns: string): Promise<string> {
  const out = await new Deno.Command("ip", {
    args: ["netns", "exec", ns, "curl", "-sS", "--max-time", "5", METRICS],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) throw new Error(`scrape failed: ${new TextDecoder().decode(out.stderr)}`);
  return text;
}

function metricValue(text: string, service: string): number {
  const series =
    `kubenftproxy_service_connections_total{namespace="default",service="${service}",port="http"}`;
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

Deno.test({
  name: "Counters: N new connections to a service port count exactly N, other services 0",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    gate.assertUsable();
    const topo: Topology = await createTopology();
    try {
      const proxy = await startProxy(topo, cluster(topo));
      try {
        const counters = new ServiceCounters(
          nftServiceCounterReader("kube-nftproxy", { netns: topo.node.ns }),
        );
        const before = await counters.read();
        const scrapedBefore = metricValue(await scrape(topo.node.ns), "web");

        const viaClusterIP = 17;
        const viaNodePort = 6;
        const results = [
          ...await probe(topo, topo.client.ns, `${WEB_V4}:80`, { count: viaClusterIP }),
          ...await probe(topo, topo.client.ns, `${topo.node.ip4}:${NODE_PORT}`, {
            count: viaNodePort,
          }),
        ];
        assert.deepEqual(
          results.filter((r) => r.outcome !== "ok").map((r) => r.outcome),
          [],
          "every connection was answered",
        );

        const after = await counters.read();
        assert.equal(
          connectionsOf(after, "web") - connectionsOf(before, "web"),
          viaClusterIP + viaNodePort,
        );
        assert.equal(connectionsOf(after, "other"), connectionsOf(before, "other"));
        assert.equal(
          metricValue(await scrape(topo.node.ns), "web") - scrapedBefore,
          viaClusterIP + viaNodePort,
          "the proxy's /metrics counts the same connections",
        );
      } finally {
        await proxy.stop();
      }
    } finally {
      await topo.cleanup();
    }
  },
});
