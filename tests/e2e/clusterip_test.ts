/**
 * Data-plane specs for ClusterIP services: the real proxy (file source) programs a node
 * namespace, and real packets from an off-cluster client and from pods show where each
 * connection went, whether it was masqueraded, and what happens without endpoints.
 */
import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import {
  NODE_POD_GATEWAY_V4,
  NODE_POD_GATEWAY_V6,
  POD_PORT,
  SERVICE_CIDR_V4,
  SERVICE_CIDR_V6,
} from "../fixtures/ip_plan.ts";
import { listConntrack } from "../netns/conntrack.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type ProbeResult, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy } from "./proxy_harness.ts";
import { probesToReachAll } from "./semantics_cases.ts";
import type { RawObject } from "../../src/source/events.ts";

const gate = await netnsTestGate();

const WEB_V4 = "10.96.0.10";
const WEB_V6 = "fd00:10:96::10";
const EMPTY_V4 = "10.96.0.11";
/** Connections that reach each of three pods but for a chance below 1e-9. */
const ALL3 = probesToReachAll(3);

function cluster(topo: Topology, podNames = topo.pods.map((p) => p.name)): RawObject[] {
  const pods = topo.pods.filter((p) => podNames.includes(p.name));
  const ports = [
    { name: "http", port: POD_PORT },
    { name: "echo", port: POD_PORT, protocol: "UDP" as const },
  ];
  return [
    node("node-a", { ips: [topo.node.ip4] }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
    service({
      name: "web",
      clusterIPs: [WEB_V4, WEB_V6],
      ports: [{ name: "http", port: 80 }, { name: "echo", port: 80, protocol: "UDP" }],
    }),
    endpointSlice({ name: "web-v4", service: "web", ports, endpoints: pods.map((p) => p.ip4) }),
    endpointSlice({
      name: "web-v6",
      service: "web",
      addressType: "IPv6",
      ports,
      endpoints: pods.map((p) => p.ip6!),
    }),
    service({ name: "empty", clusterIPs: [EMPTY_V4] }),
    // A broken Service next to the good ones: refused with one log line, harming nothing.
    service({ name: "broken", clusterIPs: ["10.0.0.300"], ports: [{ port: 70000 }] }),
  ];
}

function bodies(results: ProbeResult[]): string[] {
  return results.map((r) => r.outcome === "ok" ? r.body : r.outcome);
}

/** Runs `fn` with a topology and a proxy programming it; removes both afterwards. */
async function withCluster(fn: (topo: Topology, proxy: RunningProxy) => Promise<void>) {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const proxy = await startProxy(topo, cluster(topo));
    try {
      await fn(topo, proxy);
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
}

Deno.test({
  name: "ClusterIP: the real proxy programs a node, and packets follow every rule",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  fn: () =>
    withCluster(async (topo, proxy) => {
      const [podA, podB, podC] = topo.pods;

      await Promise.resolve(); // keep steps in order below
      const steps: [string, () => Promise<void>][] = [
        ["an off-cluster client's TCP connections spread over all three pods", async () => {
          const seen = bodies(await probe(topo, topo.client.ns, `${WEB_V4}:80`, { count: ALL3 }));
          assert.deepEqual(new Set(seen), new Set([podA.name, podB.name, podC.name]), seen.join());
        }],
        ["UDP datagrams to the same cluster IP reach the pods too", async () => {
          const seen = bodies(
            await probe(topo, topo.client.ns, `${WEB_V4}:80`, { proto: "udp", count: ALL3 }),
          );
          assert.deepEqual(new Set(seen), new Set([podA.name, podB.name, podC.name]), seen.join());
        }],
        ["IPv6 cluster IPs are served from the ip6 table", async () => {
          const seen = bodies(
            await probe(topo, topo.client.ns, `[${WEB_V6}]:80`, { count: ALL3 }),
          );
          assert.deepEqual(new Set(seen), new Set([podA.name, podB.name, podC.name]), seen.join());
        }],
        ["an off-cluster client is masqueraded: pods see the node's address", async () => {
          const v4 = bodies(
            await probe(topo, topo.client.ns, `${WEB_V4}:80`, { ask: "client", count: 5 }),
          );
          assert.ok(v4.every((b) => b.startsWith(`${NODE_POD_GATEWAY_V4}:`)), v4.join());
          const v6 = bodies(
            await probe(topo, topo.client.ns, `[${WEB_V6}]:80`, { ask: "client", count: 5 }),
          );
          assert.ok(v6.every((b) => b.startsWith(`[${NODE_POD_GATEWAY_V6}]:`)), v6.join());
        }],
        [
          "a pod keeps its source address, unless it lands on itself (hairpin: masqueraded)",
          async () => {
            // Enough connections that both a hairpin and another pod are certain but for
            // a chance below 1e-9 (each lands on pod A with probability 1/3).
            const seen = bodies(
              await probe(topo, podA.ns, `${WEB_V4}:80`, { ask: "client", count: ALL3 }),
            );
            assert.ok(
              seen.every((b) =>
                b.startsWith(`${podA.ip4}:`) || b.startsWith(`${NODE_POD_GATEWAY_V4}:`)
              ),
              seen.join(),
            );
            const entries = await listConntrack(topo.node.ns, { dst: WEB_V4, proto: "tcp" });
            const fromPod = entries.filter((e) => e.orig.src === podA.ip4);
            const fromClient = entries.filter((e) => e.orig.src === topo.client.ip4);
            assert.ok(fromClient.length > 0, JSON.stringify(entries));
            const hairpin = fromPod.filter((e) => e.reply.src === podA.ip4);
            const elsewhere = fromPod.filter((e) => e.reply.src !== podA.ip4);
            assert.ok(hairpin.length > 0 && elsewhere.length > 0, JSON.stringify(fromPod));
            // reply.dst is where the endpoint answers to: the client itself unless masqueraded.
            assert.ok(elsewhere.every((e) => e.reply.dst === podA.ip4), JSON.stringify(elsewhere));
            assert.ok(
              hairpin.every((e) => e.reply.dst === NODE_POD_GATEWAY_V4),
              JSON.stringify(hairpin),
            );
            assert.ok(fromClient.every((e) => e.reply.dst === NODE_POD_GATEWAY_V4));
          },
        ],
        // Refused, not dropped: a drop would show as a timeout, however long the wait.
        ["a service without endpoints is refused (rejected, not dropped)", async () => {
          const [result] = await probe(topo, topo.client.ns, `${EMPTY_V4}:80`, {
            timeoutMs: 10_000,
          });
          assert.equal(result.outcome, "refused");
        }],
        ["the broken Service is logged once and harms nothing", () => {
          const lines = proxy.output().split("\n").filter((l) => l.includes("default/broken"));
          assert.equal(lines.length, 1, lines.join("\n"));
          assert.match(lines[0], /cannot use Service default\/broken: spec\.clusterIPs\[0\]/);
          return Promise.resolve();
        }],
        [
          "an endpoint removed from the file receives no new connections after the sync",
          async () => {
            await proxy.update(cluster(topo, [podA.name, podB.name]));
            const seen = bodies(
              await probe(topo, topo.client.ns, `${WEB_V4}:80`, { count: probesToReachAll(2) }),
            );
            assert.deepEqual(new Set(seen), new Set([podA.name, podB.name]), seen.join());
          },
        ],
      ];
      for (const [name, step] of steps) {
        try {
          await step();
        } catch (err) {
          throw new Error(`${name}: ${(err as Error).message}`, { cause: err });
        }
      }
    }),
});
