/**
 * Self-healing in iptables mode, with both back ends: the proxy's rules watcher
 * (`IptablesRulesWatch`, every second; with iptables-legacy it looks closer only when the kernel's
 * summary of the nat or mangle table changed) notices that someone flushed the nat table on the node
 * (`iptables -t nat -F`, what a firewall reload does first) and restores the rules with a full
 * sync at its next check, long before the periodic one; intact rules are left alone. Waits are
 * on the proxy's log (`-v=4` logs every check that finds the rules intact).
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe } from "../netns/topology.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { waitForLines } from "./proxy_harness.ts";
import { ADDR, semanticsCluster } from "./semantics_cluster.ts";

const gate = await netnsTestGate();

for (const backend of ["nft", "legacy"] as const) {
  Deno.test({
    name:
      `iptables self-healing (iptables-${backend}): after \`iptables -t nat -F\` on the node, the rules watcher restores the rules and the service answers again; a deleted canary is restored too`,
    ignore: gate.ignore,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      gate.assertUsable();
      const topo = await createTopology();
      try {
        const proxy = await startIptablesProxy(topo, semanticsCluster(topo), {
          backend,
          args: ["-v=4"],
        });
        try {
          const target = `${ADDR.web}:80`;
          assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
          // Intact rules are left alone: a check finds them (every second), and nothing is
          // restored.
          await proxy.waitForLog(/our rules are intact/, 1, 60_000);
          assert.doesNotMatch(proxy.output(), /removed or flushed/, "no restore while intact");

          const flushed = await topo.exec(topo.node.ns, [`iptables-${backend}`, "-t", "nat", "-F"]);
          assert.equal(flushed.code, 0, flushed.stderr);
          // The next check notices, and the full sync it asks for brings the service back.
          await proxy.waitForLog(
            /removed or flushed by someone else; restoring them now/,
            1,
            60_000,
          );
          const restoring = proxy.output().lastIndexOf("restoring them now");
          await waitForLines(() => proxy.output().slice(restoring), /\bsynced fully: /, 1, 60_000);
          const [answer] = await probe(topo, topo.client.ns, target);
          assert.equal(
            answer.outcome,
            "ok",
            `the service did not come back; log:\n${proxy.output()}`,
          );

          // A deleted canary (a firewall reload deleting chains) is noticed and restored too.
          const canary = ["-t", "mangle", "-S", "KUBE-PROXY-CANARY"];
          const deleted = await topo.exec(topo.node.ns, [
            `iptables-${backend}`,
            ...["-t", "mangle", "-X", "KUBE-PROXY-CANARY"],
          ]);
          assert.equal(deleted.code, 0, deleted.stderr);
          await proxy.waitForLog(/restoring them now/, 2, 60_000);
          const again = proxy.output().lastIndexOf("restoring them now");
          await waitForLines(() => proxy.output().slice(again), /\bsynced fully: /, 1, 60_000);
          const back = await topo.exec(topo.node.ns, [`iptables-${backend}`, ...canary]);
          assert.equal(back.code, 0, `the canary was not restored; log:\n${proxy.output()}`);
        } finally {
          await proxy.stop();
        }
      } finally {
        await topo.cleanup();
      }
    },
  });
}
