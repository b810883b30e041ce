/**
 * Specs of the data-plane harness itself: the namespace topology routes real packets between
 * client and pods in both families and transports, an unprogrammed service IP times out, the
 * conntrack helpers see connections, and nothing of a run is left behind.
 *
 * Skipped (with the reason in the test name) where namespaces cannot be used, except under
 * `CI=true`, where that is a failure.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  NODE_POD_GATEWAY_V4,
  POD_EXTRA_PORTS,
  POD_PORT,
  serviceIPv4,
  serviceIPv6,
} from "../fixtures/ip_plan.ts";
import { enableConntrack, listConntrack, watchConntrackEvents } from "./conntrack.ts";
import {
  cleanupStale,
  createNamespace,
  deleteNamespace,
  listNamespaces,
  netnsTestGate,
  run,
  runOk,
  shortId,
} from "./netns.ts";
import { createTopology, formatTarget, probe, type ProbeResult } from "./topology.ts";

const gate = await netnsTestGate();
const skipped = gate.ignore ? ` (skipped: ${gate.reason})` : "";

function bodies(results: ProbeResult[]): string[] {
  return results.map((r) => (r.outcome === "ok" ? r.body : `<${r.outcome}>`));
}

Deno.test({
  name: "createTopology() builds a routed dual-stack cluster of client, node and pods" + skipped,
  ignore: gate.ignore,
  async fn(t) {
    gate.assertUsable();
    const topo = await createTopology();
    try {
      assert.deepEqual(topo.pods.map((p) => p.name), ["pod-a", "pod-b", "pod-c"]);
      assert.ok(topo.namespaces.every((ns) => ns.startsWith(`knp-${topo.id}-`)));

      await t.step(
        "the client reaches every pod directly via the node: TCP+UDP, v4+v6",
        async () => {
          const rows = topo.pods.flatMap((pod) =>
            (["tcp", "udp"] as const).flatMap((proto) =>
              [pod.ip4, pod.ip6 ?? ""].map((ip) => ({ to: formatTarget(ip, POD_PORT), proto, pod }))
            )
          );
          const got = await Promise.all(
            rows.map((row) => probe(topo, topo.client.ns, row.to, { proto: row.proto })),
          );
          rows.forEach((row, i) => {
            assert.deepEqual(bodies(got[i]), [row.pod.name], `${row.proto} ${row.to}`);
          });
        },
      );

      await t.step("pods serve their extra ports and see the real client address", async () => {
        const [pod] = topo.pods;
        const extra = await probe(topo, topo.pods[1].ns, formatTarget(pod.ip4, POD_EXTRA_PORTS[0]));
        assert.deepEqual(bodies(extra), [pod.name]);
        const seen = await probe(topo, topo.client.ns, formatTarget(pod.ip6 ?? "", POD_PORT), {
          proto: "udp",
          ask: "client",
          sourcePort: 41000,
        });
        assert.deepEqual(bodies(seen), [`[${topo.client.ip6}]:41000`]);
      });

      await t.step(
        "a closed port is refused: TCP by a RST, UDP by ICMP port unreachable",
        async () => {
          const [pod] = topo.pods;
          const [tcp, udp4, udp6] = await Promise.all([
            probe(topo, topo.client.ns, formatTarget(pod.ip4, 7), { count: 2 }),
            probe(topo, topo.pods[1].ns, formatTarget(pod.ip4, 7), { proto: "udp", count: 2 }),
            probe(topo, topo.pods[2].ns, formatTarget(pod.ip6 ?? "", 7), { proto: "udp" }),
          ]);
          assert.deepEqual(tcp.map((r) => r.outcome), ["refused", "refused"]);
          assert.deepEqual(udp4.map((r) => r.outcome), ["refused", "refused"]);
          assert.deepEqual(udp6.map((r) => r.outcome), ["refused"]);
        },
      );

      // Without rules the node forwards service traffic along its default route into the packet
      // sink, which discards it silently: no RST, no ICMP, so the client times out. (Without
      // that route the node would answer "network unreachable" and look like a reject rule.)
      await t.step("a service IP without rules times out, in both families", async () => {
        const targets = [serviceIPv4(0), serviceIPv6(0)].map((ip) => formatTarget(ip, 80));
        const got = await Promise.all(
          targets.flatMap((to) =>
            (["tcp", "udp"] as const).map((proto) =>
              probe(topo, topo.client.ns, to, { proto, timeoutMs: 300 })
            )
          ),
        );
        assert.deepEqual(got.map((r) => r[0].outcome), [
          "timeout",
          "timeout",
          "timeout",
          "timeout",
        ]);
      });

      await t.step("conntrack helpers list and watch connections through the node", async () => {
        const before = await listConntrack(topo.node.ns);
        assert.deepEqual(before, [], "a namespace without ct rules tracks nothing");
        await enableConntrack(topo.node.ns);
        const watch = await watchConntrackEvents(topo.node.ns);
        try {
          const [pod] = topo.pods;
          await probe(topo, topo.client.ns, formatTarget(pod.ip4, POD_PORT));
          await probe(topo, topo.client.ns, formatTarget(pod.ip4, 7));
          const refusedEvent = await watch.waitFor((e) => e.orig.dport === 7);
          assert.equal(refusedEvent.proto, "tcp");
          assert.equal(refusedEvent.event, "NEW");
          assert.equal(refusedEvent.orig.src, topo.client.ip4);
          const listed = await listConntrack(topo.node.ns, { dst: pod.ip4, proto: "tcp" });
          assert.deepEqual(listed.map((e) => [e.orig.dport, e.reply.src, e.reply.sport]), [
            [POD_PORT, pod.ip4, POD_PORT],
          ], "the refused connection (RST only) is gone from the table");
        } finally {
          await watch.stop();
        }
      });

      await t.step("exec() and startProcess() only run in the topology's namespaces", async () => {
        const out = await topo.exec(topo.pods[0].ns, ["ip", "-4", "route", "show", "default"]);
        assert.match(
          out.stdout,
          new RegExp(`default via ${NODE_POD_GATEWAY_V4.replaceAll(".", "\\.")}`),
        );
        await assert.rejects(topo.exec("knp-elsewhere", ["true"]), /not part of topology/);
        const sleeper = topo.startProcess(topo.node.ns, ["sleep", "30"]);
        await topo.cleanup();
        assert.equal((await sleeper.status).signal, "SIGTERM");
      });

      await t.step("cleanup() removes every namespace of this run and is idempotent", async () => {
        await topo.cleanup();
        await topo.cleanup();
        assert.deepEqual(await listNamespaces(`knp-${topo.id}-`), []);
      });
    } finally {
      await topo.cleanup();
    }
  },
});

Deno.test({
  name: "createTopology() without IPv6 builds an IPv4-only cluster" + skipped,
  ignore: gate.ignore,
  async fn() {
    gate.assertUsable();
    const topo = await createTopology({ pods: ["solo"], ipv6: false, ports: [8080] });
    try {
      assert.equal(topo.pods[0].ip6, undefined);
      assert.equal(topo.client.ip6, undefined);
      const v4 = await probe(topo, topo.client.ns, formatTarget(topo.pods[0].ip4, 8080));
      assert.deepEqual(bodies(v4), ["solo"]);
      const addrs = await topo.exec(topo.pods[0].ns, [
        "ip",
        "-6",
        "addr",
        "show",
        "scope",
        "global",
      ]);
      assert.equal(addrs.stdout.trim(), "");
    } finally {
      await topo.cleanup();
    }
    assert.deepEqual(await listNamespaces(`knp-${topo.id}-`), []);
  },
});

Deno.test({
  name: "cleanupStale() deletes namespaces whose creator is gone, keeps live and foreign ones" +
    skipped,
  ignore: gate.ignore,
  async fn() {
    gate.assertUsable();
    const prefix = `knp-${shortId()}-`;
    const [stale, live, foreign] = ["stale", "live", "foreign"].map((n) => prefix + n);
    try {
      await createNamespace(live);
      await runOk(["ip", "netns", "add", stale]);
      // A pid above pid_max: a creator that cannot exist any more.
      await runOk(["ip", "-n", stale, "link", "set", "lo", "alias", "knp-owner=2147483647:1"]);
      await runOk(["ip", "netns", "add", foreign]);
      assert.deepEqual(await cleanupStale(prefix), [stale]);
      assert.deepEqual(await listNamespaces(prefix), [foreign, live]);
      assert.deepEqual(await cleanupStale(prefix, { includeUnowned: true }), [foreign]);
    } finally {
      for (const ns of [stale, live, foreign]) await deleteNamespace(ns);
    }
    assert.deepEqual(await listNamespaces(prefix), []);
  },
});

Deno.test("run() refuses nft, conntrack and sysctl outside a namespace", async () => {
  for (const cmd of [["nft", "list", "ruleset"], ["/usr/sbin/conntrack", "-L"], ["sysctl", "-a"]]) {
    await assert.rejects(run(cmd), /machine's own network namespace/);
  }
});

Deno.test("createNamespace() refuses names without the knp- prefix", async () => {
  await assert.rejects(createNamespace("test-ns"), /must start with knp-/);
  await assert.rejects(createNamespace("knp-a b"), /must start with knp-/);
});
