import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { endpointSlice, service } from "../../tests/fixtures/objects.ts";
import { kernelGate, withScratch } from "../../tests/nft_scratch.ts";
import { deleteTables, NftApplyError, tableExists, tableFamilies } from "./nft.ts";

Deno.test({
  name: "applyNft() refused halfway through leaves the previous ruleset byte-for-byte in place",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const state = new ProxyState({ hostname: "node-a", log: () => {} });
      state.onEvent({
        kind: "Service",
        current: service({ name: "web", clusterIPs: ["10.96.0.10"] }),
      });
      state.onEvent({
        kind: "EndpointSlice",
        current: endpointSlice({ name: "web-1", service: "web", endpoints: ["10.244.1.11"] }),
      });
      const planner = new NftPlanner({ ...DEFAULT_CONFIG, hostname: "node-a" });
      const { changed } = state.takeChanges();
      await k.load(planner.plan(state, { full: true, changed }).script);
      const before = `${await k.list("ip")}${await k.list("ip6")}`;
      // A full re-assert (flushes everything first) whose last command the kernel refuses.
      const full = planner.plan(state, { full: true, changed: new Set() }).script;
      const broken = `${full}add element ip kube-nftproxy cluster-ips { 10.96.0.300 }\n`;
      const error = await k.load(broken).then(() => undefined, (err) => err);
      assert.ok(error instanceof NftApplyError, String(error));
      assert.equal(error.line, broken.split("\n").length - 1, "names the failing line");
      assert.equal(`${await k.list("ip")}${await k.list("ip6")}`, before);
    }),
});

Deno.test({
  name:
    "tableExists() tells a present table from an absent one without changing either, and deleteTables() removes only ours where present",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const nft = { netns: k.ns };
      await k.load("add table ip kube-nftproxy\nadd table ip6 someone-else\n");
      assert.equal(await tableExists("ip", "kube-nftproxy", nft), true);
      assert.equal(await tableExists("ip6", "kube-nftproxy", nft), false);
      assert.equal(await tableExists("inet", "kube-nftproxy-trace", nft), false);
      // Asking created nothing.
      assert.deepEqual(await tableFamilies("kube-nftproxy", nft), ["ip"]);
      await deleteTables("kube-nftproxy", nft);
      assert.deepEqual(await tableFamilies("kube-nftproxy", nft), []);
      assert.equal(await tableExists("ip6", "someone-else", nft), true);
    }),
});
