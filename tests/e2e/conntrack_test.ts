/**
 * Data-plane specs of the conntrack reconciler: a hand-written DNAT in the node namespace (a
 * small table of this test's own, not the proxy's), a UDP client reusing one source port, and the
 * kernel's conntrack table showing why the reconciler is needed and that it works; then the
 * real proxy finding flows that went stale while it was down.
 *
 * @module
 */
import assert from "node:assert/strict";
import { reconcileConntrack } from "../../src/apply/conntrack.ts";
import type { ConntrackService } from "../../src/apply/conntrack_plan.ts";
import { listConntrack } from "../netns/conntrack.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type ProbeResult, type Topology } from "../netns/topology.ts";
import { POD_PORT } from "../fixtures/ip_plan.ts";
import { endpointSlice, service } from "../fixtures/objects.ts";
import type { RawObject } from "../../src/source/events.ts";
import { startProxy } from "./proxy_harness.ts";

const gate = await netnsTestGate();

/** A service IP whose endpoint is switched from pod-a to pod-b. */
const MOVED_IP = "10.96.0.50";
/** A service IP that has no rule (no endpoints) at first, then gets pod-a. */
const LATE_IP = "10.96.0.51";
/** The proxy-programmed UDP service of the restart test. */
const DNS_IP = "10.96.0.53";
const SERVICE_PORT = 80;
const TABLE = "knp_test";

/** This test's own NAT table: `dnats` maps a service IP to the pod IP it is DNATed to. */
function natTable(dnats: Record<string, string>): string {
  const rules = Object.entries(dnats).map(([svc, pod]) =>
    `add rule ip ${TABLE} prerouting ip daddr ${svc} udp dport ${SERVICE_PORT} ` +
    `dnat to ${pod}:${POD_PORT}\n`
  );
  return `add table ip ${TABLE}\ndelete table ip ${TABLE}\nadd table ip ${TABLE}\n` +
    `add chain ip ${TABLE} prerouting { type nat hook prerouting priority dstnat; policy accept; }\n` +
    rules.join("");
}

function udpService(serviceIP: string, endpoints: string[]): ConntrackService {
  return { serviceIP, port: SERVICE_PORT, protocol: "UDP", nodePort: 0, endpoints };
}

function body(results: ProbeResult[]): string {
  const [r] = results;
  return r.outcome === "ok" ? r.body : r.outcome;
}

async function program(topo: Topology, dnats: Record<string, string>): Promise<void> {
  const result = await topo.exec(topo.node.ns, ["nft", "-f", "-"], { stdin: natTable(dnats) });
  assert.equal(result.code, 0, result.stderr);
}

Deno.test({
  name: "reconcileConntrack() unsticks UDP flows after their endpoint changes, in a real kernel",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.assertUsable();
    const topo = await createTopology({ pods: ["pod-a", "pod-b"], ipv6: false });
    try {
      const [podA, podB] = topo.pods;
      const udp = (ip: string, sourcePort: number, timeoutMs = 1000) =>
        probe(topo, topo.client.ns, `${ip}:${SERVICE_PORT}`, {
          proto: "udp",
          sourcePort,
          timeoutMs,
        });
      const steps: [string, () => Promise<void>][] = [
        ["a flow DNATed to pod-a keeps going there after the rule moves to pod-b", async () => {
          await program(topo, { [MOVED_IP]: podA.ip4 });
          assert.equal(body(await udp(MOVED_IP, 40000)), "pod-a");
          await program(topo, { [MOVED_IP]: podB.ip4 });
          assert.equal(body(await udp(MOVED_IP, 40001)), "pod-b", "a new flow follows the rule");
          assert.equal(body(await udp(MOVED_IP, 40000)), "pod-a", "the old flow is stale");
          const entries = await listConntrack(topo.node.ns, { dst: MOVED_IP, proto: "udp" });
          const stale = entries.filter((e) => e.orig.sport === 40000);
          assert.deepEqual(stale.map((e) => e.reply.src), [podA.ip4], JSON.stringify(entries));
        }],
        [
          "the reconciler deletes only the stale flow, and its next datagram reaches pod-b",
          async () => {
            const netns = topo.node.ns;
            const services = [udpService(MOVED_IP, [podB.ip4])];
            const [v4] = await reconcileConntrack(services, { netns, families: ["IPv4"] });
            assert.deepEqual([v4.deleted, v4.error], [1, undefined]);
            const left = await listConntrack(topo.node.ns, { dst: MOVED_IP, proto: "udp" });
            assert.deepEqual(left.map((e) => e.reply.src), [podB.ip4], JSON.stringify(left));
            assert.equal(body(await udp(MOVED_IP, 40000)), "pod-b");
            // Nothing left to delete: a second run deletes nothing and is not an error.
            const [again] = await reconcileConntrack(services, { netns, families: ["IPv4"] });
            assert.deepEqual([again.deleted, again.error], [0, undefined]);
          },
        ],
        [
          "a flow that started while the service had no endpoints stays un-NATed until reconciled",
          async () => {
            assert.equal(body(await udp(LATE_IP, 41000, 300)), "timeout");
            await program(topo, { [MOVED_IP]: podB.ip4, [LATE_IP]: podA.ip4 });
            assert.equal(body(await udp(LATE_IP, 41001)), "pod-a", "a new flow is DNATed");
            assert.equal(body(await udp(LATE_IP, 41000, 300)), "timeout", "the old one is stuck");
            const services = [udpService(MOVED_IP, [podB.ip4]), udpService(LATE_IP, [podA.ip4])];
            const [v4] = await reconcileConntrack(services, {
              netns: topo.node.ns,
              families: ["IPv4"],
            });
            assert.equal(v4.deleted, 1);
            assert.equal(body(await udp(LATE_IP, 41000)), "pod-a");
            // The DNATed flow from port 41001 was left alone.
            const entries = await listConntrack(topo.node.ns, { dst: LATE_IP, proto: "udp" });
            assert.ok(entries.some((e) => e.orig.sport === 41001), JSON.stringify(entries));
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
    } finally {
      await topo.cleanup();
    }
  },
});

Deno.test({
  name: "the proxy deletes UDP flows that went stale while it was down, at its first sync",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.assertUsable();
    const topo = await createTopology({ pods: ["pod-a", "pod-b"], ipv6: false });
    try {
      const [podA, podB] = topo.pods;
      const dns = (pod: string): RawObject[] => [
        service({
          name: "dns",
          clusterIPs: [DNS_IP],
          ports: [{ name: "dns", port: 53, protocol: "UDP", targetPort: POD_PORT }],
        }),
        endpointSlice({
          name: "dns-1",
          service: "dns",
          ports: [{ name: "dns", port: POD_PORT, protocol: "UDP" }],
          endpoints: [pod],
        }),
      ];
      const ask = async () =>
        body(
          await probe(topo, topo.client.ns, `${DNS_IP}:53`, {
            proto: "udp",
            sourcePort: 42000,
          }),
        );
      const first = await startProxy(topo, dns(podA.ip4));
      assert.equal(await ask(), "pod-a");
      await first.stop();
      // While the proxy is down, the Service's endpoint moves to pod-b.
      const second = await startProxy(topo, dns(podB.ip4));
      try {
        let answer = await ask();
        for (let i = 0; i < 20 && answer !== "pod-b"; i++) {
          await new Promise((r) => setTimeout(r, 250));
          answer = await ask();
        }
        assert.equal(answer, "pod-b", "the flow DNATed to pod-a before the restart was deleted");
      } finally {
        await second.stop();
      }
    } finally {
      await topo.cleanup();
    }
  },
});
