import assert from "node:assert/strict";
import type { IPFamily } from "../model/service_port.ts";
import { runOk } from "../../tests/netns/netns.ts";
import { BACKENDS, kernelGate, withIptablesScratch } from "../../tests/e2e/iptables_harness.ts";
import { iptablesRulesIntact, IptablesRulesWatch } from "./iptables_watch.ts";
import { type TableInfo, TableInfoError } from "./iptables_info.ts";

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

Deno.test({
  name: "iptablesNftRulesIntactNetlink() asks the kernel over netlink and sees the same removals " +
    "as the listings, in the kernel",
  ignore: kernelGate.ignore,
  async fn() {
    const script = await Deno.readTextFile(GOLDEN);
    const module = JSON.stringify(new URL("./iptables_watch.ts", import.meta.url).href);
    await withIptablesScratch(async (k) => {
      /** The netlink check, run inside the namespace (netlink answers for the caller's own). */
      const viaNetlink = async (families: readonly IPFamily[] = BOTH) => {
        const out = await runOk([
          Deno.execPath(),
          "eval",
          `import { iptablesNftRulesIntactNetlink } from ${module};
           console.log(await iptablesNftRulesIntactNetlink(${JSON.stringify(families)}));`,
        ], { ns: k.ns });
        return JSON.parse(out) as boolean;
      };
      /** Both checks, which must agree. */
      const intact = async (families: readonly IPFamily[] = BOTH) => {
        const netlink = await viaNetlink(families);
        const listings = await iptablesRulesIntact({ backend: "nft", families, netns: k.ns });
        assert.equal(netlink, listings, `netlink and listings disagree for ${families}`);
        return netlink;
      };
      const iptables = (family: IPFamily, ...args: string[]) =>
        runOk([`${family === "IPv6" ? "ip6" : "ip"}tables-nft`, ...args], { ns: k.ns });

      assert.equal(await intact(), false, "nothing synced yet");
      await k.apply(script, "nft");
      assert.equal(await intact(), true, "after a full sync");
      for (const family of BOTH) {
        const other = BOTH.filter((f) => f !== family);
        await iptables(family, "-t", "nat", "-F");
        assert.equal(await intact([family]), false, `${family} nat flushed`);
        assert.equal(await intact(other), true, "the other family is intact");
        await k.apply(script, "nft");
        await iptables(family, "-t", "mangle", "-X", "KUBE-PROXY-CANARY");
        assert.equal(await intact([family]), false, `${family} canary deleted`);
        await k.apply(script, "nft");
        await iptables(
          family,
          ...["-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment"],
          ...["kubernetes service portals", "-j", "KUBE-SERVICES"],
        );
        assert.equal(await intact([family]), false, `${family} PREROUTING jump deleted`);
        await k.apply(script, "nft");
        assert.equal(await intact(), true);
      }
      await runOk(["nft", "flush", "ruleset"], { ns: k.ns });
      assert.equal(await intact(), false, "nft flush ruleset");
    });
  },
});

/** A legacy kernel as the watch sees it: one summary per table, a full check, a clock. */
function fakeLegacy() {
  const info = (numEntries: number): TableInfo => ({
    validHooks: 27,
    hookEntry: [0, 152, 0xffffffff, 304, 456],
    underflow: [0, 152, 0xffffffff, 304, 456],
    numEntries,
    size: 152 * numEntries,
  });
  const kernel = {
    entries: new Map<string, number>([["IPv4 nat", 500], ["IPv4 mangle", 8]]),
    intact: true,
    fullChecks: 0,
    now: 0,
  };
  const watch = new IptablesRulesWatch({
    backend: "legacy",
    families: ["IPv4"],
    readInfo: (family, table) => info(kernel.entries.get(`${family} ${table}`) ?? 0),
    fullCheck: () => {
      kernel.fullChecks++;
      return Promise.resolve(kernel.intact);
    },
    now: () => kernel.now,
  });
  /** Someone changes nat: `intact` says whether our rules survive it. */
  const change = (table: string, delta: number, intact: boolean) => {
    kernel.entries.set(`IPv4 ${table}`, kernel.entries.get(`IPv4 ${table}`)! + delta);
    kernel.intact = intact;
  };
  return { kernel, watch, change };
}

Deno.test("IptablesRulesWatch.intact() with iptables-legacy runs the full check only when a table's summary changed", async () => {
  const { kernel, watch, change } = fakeLegacy();
  assert.ok(watch.constantCost);
  assert.equal(await watch.intact(), true, "nothing known yet: the full check decides");
  assert.equal(kernel.fullChecks, 1);
  for (let i = 0; i < 10; i++) assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 1, "unchanged summaries: intact without the full check");

  change("nat", -400, false); // iptables -t nat -F
  assert.equal(await watch.intact(), false, "a flush is noticed at once");
  assert.equal(await watch.intact(), false, "and not forgotten until our rules are back");
  assert.equal(kernel.fullChecks, 3);
  change("nat", +400, true); // restored (by a sync the watch did not see)
  assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 4, "a check after a removal is never held back");

  kernel.now += 10_000;
  change("nat", +1, true); // another program adds a rule of its own
  assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 5, "a change is looked at closely");
  assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 5, "and the new summary remembered");
});

Deno.test("IptablesRulesWatch.intact() runs at most one full check per fullCheckSpacingMs while another program keeps changing the tables", async () => {
  const { kernel, watch, change } = fakeLegacy();
  await watch.intact();
  for (let second = 1; second <= 60; second++) {
    kernel.now += 1_000;
    change("nat", +1, true); // e.g. a CNI plugin's port mapping, every second
    assert.equal(await watch.intact(), true);
  }
  assert.equal(kernel.fullChecks, 7, "one at the start, then one per 10 s");
  change("nat", -400, false); // a flush 9 s after the last checked change
  assert.equal(await watch.intact(), true, "held back within the spacing");
  kernel.now += 1_000;
  assert.equal(await watch.intact(), false, "noticed once it has passed");
});

Deno.test("IptablesRulesWatch.applied() remembers our own sync, but not one that followed someone else's change", async () => {
  const { kernel, watch, change } = fakeLegacy();
  await watch.intact();
  await watch.applied(() => Promise.resolve(change("nat", +20, true))); // our sync
  assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 1, "our own change needs no full check");

  change("mangle", -2, false); // iptables -t mangle -X KUBE-PROXY-CANARY
  await watch.applied(() => Promise.resolve(change("nat", +1, false))); // a partial sync
  assert.equal(await watch.intact(), false, "the canary's deletion is still noticed");
  assert.equal(kernel.fullChecks, 2);
});

Deno.test("IptablesRulesWatch.intact() runs the full check every fullCheckEveryMs even when nothing seems changed", async () => {
  const { kernel, watch } = fakeLegacy();
  await watch.intact();
  kernel.intact = false; // a rule replaced by another of the same size: summaries unchanged
  kernel.now += 299_000;
  assert.equal(await watch.intact(), true, "not seen within the period");
  kernel.now += 1_000;
  assert.equal(await watch.intact(), false, "seen at the periodic full check");
});

Deno.test("IptablesRulesWatch with iptables-nft or in another namespace always runs the full check", async () => {
  for (const options of [{ backend: "nft" as const }, { backend: "legacy" as const, netns: "x" }]) {
    let fullChecks = 0;
    const watch = new IptablesRulesWatch({
      ...options,
      families: ["IPv4"],
      fullCheck: () => Promise.resolve(++fullChecks > 0),
    });
    assert.ok(!watch.constantCost);
    await watch.intact();
    await watch.intact();
    assert.equal(fullChecks, 2);
  }
});

Deno.test("IptablesRulesWatch.intact() with iptables-legacy does not run the full check while our own sync is applied", async () => {
  const { kernel, watch, change } = fakeLegacy();
  change("nat", -400, false); // flushed; our restore is on its way
  let release!: () => void;
  const restore = watch.applied(() => new Promise<void>((resolve) => release = resolve));
  assert.equal(await watch.intact(), true, "nothing to say while our sync holds the lock");
  assert.equal(kernel.fullChecks, 0);
  change("nat", +400, true);
  release();
  await restore;
  assert.equal(await watch.intact(), true);
  assert.equal(kernel.fullChecks, 1, "checked once our sync is done");
});

Deno.test("IptablesRulesWatch with iptables-legacy falls back to the full check where the kernel may not be asked, every 10 s if that is found out late", async () => {
  let allowed = false;
  let fullChecks = 0;
  let now = 0;
  const options = {
    backend: "legacy" as const,
    families: ["IPv4" as const],
    readInfo: (): TableInfo => {
      if (!allowed) throw new TableInfoError("cannot open a raw IPv4 socket: EPERM", 1);
      return { validHooks: 27, hookEntry: [], underflow: [], numEntries: 5, size: 784 };
    },
    fullCheck: () => Promise.resolve(++fullChecks > 0),
    now: () => now,
  };
  assert.ok(!new IptablesRulesWatch(options).constantCost, "no CAP_NET_RAW from the start");

  allowed = true;
  const watch = new IptablesRulesWatch(options);
  assert.ok(watch.constantCost);
  allowed = false;
  fullChecks = 0;
  for (let second = 0; second < 30; second++, now += 1_000) await watch.intact();
  assert.equal(fullChecks, 3, "lost later: one full check per 10 s");
});
