import assert from "node:assert/strict";
import {
  createNamespace,
  deleteNamespace,
  netnsTestGate,
  shortId,
} from "../../tests/netns/netns.ts";
import { applyNft } from "./nft.ts";
import { nftRulesIntact } from "./nft_watch.ts";

const gate = await netnsTestGate();
const GOLDEN = new URL("../../nft/golden/clusterip.nft", import.meta.url);

Deno.test({
  name:
    "nftRulesIntact() is true for programmed tables and false once a dispatch chain or table is gone",
  ignore: gate.ignore,
  async fn() {
    const ns = `knp-${shortId()}-watch`;
    try {
      await createNamespace(ns);
      await applyNft(await Deno.readTextFile(GOLDEN), { netns: ns });
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns }), true);
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns, families: ["ip"] }), true);
      await applyNft("flush chain ip6 kube-nftproxy services\n", { netns: ns });
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns }), false);
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns, families: ["ip"] }), true);
      await applyNft("flush chain ip kube-nftproxy nat-prerouting\n", { netns: ns });
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns, families: ["ip"] }), false);
      await applyNft("flush ruleset\n", { netns: ns });
      assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns }), false);
    } finally {
      await deleteNamespace(ns);
    }
  },
});
