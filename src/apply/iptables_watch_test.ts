import assert from "node:assert/strict";
import type { IPFamily } from "../model/service_port.ts";
import { runOk } from "../../tests/netns/netns.ts";
import { BACKENDS, kernelGate, withIptablesScratch } from "../../tests/e2e/iptables_harness.ts";
import { iptablesRulesIntact } from "./iptables_watch.ts";

const GOLDEN = new URL("../render/iptables/testdata/small_cluster.iptables", import.meta.url);
const BOTH: readonly IPFamily[] = ["IPv4", "IPv6"];

Deno.test({
  name:
    "iptablesRulesIntact() is true after a sync and false, per family, after a nat flush, a deleted canary or a deleted jump",
  ignore: kernelGate.ignore,
  async fn() {
    const script = await Deno.readTextFile(GOLDEN);
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        const intact = (families: readonly IPFamily[] = BOTH) =>
          iptablesRulesIntact({ backend, families, netns: k.ns });
        const iptables = (family: IPFamily, ...args: string[]) =>
          runOk([`${family === "IPv6" ? "ip6" : "ip"}tables-${backend}`, ...args], { ns: k.ns });
        const label = `iptables-${backend}`;

        assert.equal(await intact(), false, `${label}: nothing synced yet`);
        await k.apply(script, backend);
        assert.equal(await intact(), true, `${label}: after a full sync`);

        for (const family of BOTH) {
          const other = BOTH.filter((f) => f !== family);
          await iptables(family, "-t", "nat", "-F");
          assert.equal(await intact(), false, `${label}: ${family} nat flushed`);
          assert.equal(await intact([family]), false);
          assert.equal(await intact(other), true, `${label}: the other family is intact`);
          await k.apply(script, backend);
          assert.equal(await intact(), true, `${label}: a full sync restores ${family}`);

          await iptables(family, "-t", "mangle", "-X", "KUBE-PROXY-CANARY");
          assert.equal(await intact([family]), false, `${label}: ${family} canary deleted`);
          assert.equal(await intact(other), true);
          await k.apply(script, backend);
          assert.equal(await intact(), true);

          await iptables(
            family,
            ...["-t", "nat", "-D", "OUTPUT", "-m", "comment", "--comment"],
            ...["kubernetes service portals", "-j", "KUBE-SERVICES"],
          );
          assert.equal(await intact([family]), false, `${label}: ${family} OUTPUT jump deleted`);
          await k.apply(script, backend);
          assert.equal(await intact(), true);
        }

        // A firewall reload: every table flushed and every chain deleted.
        for (const family of BOTH) {
          for (const table of ["mangle", "nat", "filter"]) {
            await iptables(family, "-t", table, "-F");
            await iptables(family, "-t", table, "-X");
          }
        }
        assert.equal(await intact(), false, `${label}: everything flushed and deleted`);
      });
    }
  },
});
