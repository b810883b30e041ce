/**
 * Self-healing in iptables mode, with both back ends: the proxy's rules watcher
 * (`iptablesRulesIntact`, every second) notices that someone flushed the nat table on the node
 * (`iptables -t nat -F`, what a firewall reload does first) and restores the rules with a full
 * sync, long before the periodic one; intact rules are left alone.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe } from "../netns/topology.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { ADDR, semanticsCluster } from "./semantics_cluster.ts";

const gate = await netnsTestGate();

for (const backend of ["nft", "legacy"] as const) {
  Deno.test({
    name:
      `iptables self-healing (iptables-${backend}): after \`iptables -t nat -F\` on the node, the service answers again within seconds`,
    ignore: gate.ignore,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      gate.assertUsable();
      const topo = await createTopology();
      try {
        const proxy = await startIptablesProxy(topo, semanticsCluster(topo), { backend });
        try {
          const target = `${ADDR.web}:80`;
          assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
          // Intact rules are left alone: a few checks pass without a restore.
          await new Promise((r) => setTimeout(r, 2_500));
          assert.doesNotMatch(proxy.output(), /removed or flushed/, "no restore while intact");

          const flushed = await topo.exec(topo.node.ns, [`iptables-${backend}`, "-t", "nat", "-F"]);
          assert.equal(flushed.code, 0, flushed.stderr);
          const started = Date.now();
          let outcome = "";
          while (Date.now() - started < 8_000 && outcome !== "ok") {
            [{ outcome }] = await probe(topo, topo.client.ns, target, { timeoutMs: 300 });
          }
          assert.equal(outcome, "ok", `the service never came back; log:\n${proxy.output()}`);
          assert.match(proxy.output(), /removed or flushed/);
          console.log(
            `iptables-${backend}: rules restored ${Date.now() - started} ms after the flush`,
          );
        } finally {
          await proxy.stop();
        }
      } finally {
        await topo.cleanup();
      }
    },
  });
}
