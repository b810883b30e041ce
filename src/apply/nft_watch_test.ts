import assert from "node:assert/strict";
import {
  createNamespace,
  deleteNamespace,
  netnsTestGate,
  shortId,
} from "../../tests/netns/netns.ts";
import { applyNft, runNft } from "./nft.ts";
import { withScratch } from "../../tests/nft_scratch.ts";
import { nftRulesIntact, readRulesCheck, rulesCheckScript } from "./nft_watch.ts";

const gate = await netnsTestGate();
const GOLDEN = new URL("../../nft/golden/clusterip.nft", import.meta.url);
const SCRIPT = rulesCheckScript("kube-nftproxy", ["ip", "ip6"]);
const BUSY = (line: number) =>
  `/dev/stdin:${line}:29-39: Error: Could not process rule: Device or resource busy\n` +
  "delete map ip kube-nftproxy service-ips\n                            ^^^^^^^^^^^\n";
const GONE = (line: number) =>
  `/dev/stdin:${line}:45-51: Error: Could not process rule: No such file or directory\n`;

Deno.test("readRulesCheck() is true when every family's dispatch map is in use", () => {
  assert.equal(readRulesCheck(SCRIPT, 1, BUSY(2) + BUSY(4)), true);
});

Deno.test("readRulesCheck() is false when a family's dispatch map is no longer used", () => {
  assert.equal(readRulesCheck(SCRIPT, 1, BUSY(2)), false);
  assert.equal(readRulesCheck(SCRIPT, 0, ""), false);
});

Deno.test("readRulesCheck() is false when nat-prerouting lost its rules, a chain or a table", () => {
  assert.equal(readRulesCheck(SCRIPT, 1, GONE(3)), false);
  assert.equal(
    readRulesCheck(
      SCRIPT,
      1,
      "/dev/stdin:1:16-28: Error: No such file or directory; did you mean table ‘kube-nftproxy’ in family ip6?\n",
    ),
    false,
  );
});

Deno.test("readRulesCheck() throws on an answer that is not about our rules", () => {
  assert.throws(
    () => readRulesCheck(SCRIPT, 1, "/dev/stdin:1:1-6: Error: Operation not permitted\n"),
    /line 1: Operation not permitted/,
  );
  assert.throws(
    () => readRulesCheck(SCRIPT, 1, "netlink: Error: cannot open socket\n"),
    /exit code 1/,
  );
});

Deno.test({
  name: "nftRulesIntact() is true for programmed tables and false once a dispatch rule, " +
    "chain or table is gone, in the kernel",
  ignore: gate.ignore,
  async fn() {
    const ns = `knp-${shortId()}-watch`;
    const intact = (families?: ("ip" | "ip6")[]) =>
      nftRulesIntact("kube-nftproxy", { netns: ns, families });
    try {
      await createNamespace(ns);
      await applyNft(await Deno.readTextFile(GOLDEN), { netns: ns });
      assert.equal(await intact(), true);
      assert.equal(await intact(["ip"]), true);
      await applyNft("flush chain ip6 kube-nftproxy services\n", { netns: ns });
      assert.equal(await intact(), false);
      assert.equal(await intact(["ip"]), true);
      await applyNft("flush chain ip kube-nftproxy nat-prerouting\n", { netns: ns });
      assert.equal(await intact(["ip"]), false);
      await applyNft(await Deno.readTextFile(GOLDEN), { netns: ns });
      await applyNft("delete chain ip6 kube-nftproxy nat-prerouting\n", { netns: ns });
      assert.equal(await intact(), false);
      await applyNft(await Deno.readTextFile(GOLDEN), { netns: ns });
      await applyNft("delete table ip kube-nftproxy\n", { netns: ns });
      assert.equal(await intact(), false);
      assert.equal(await intact(["ip6"]), true);
      await applyNft("flush ruleset\n", { netns: ns });
      assert.equal(await intact(), false);
    } finally {
      await deleteNamespace(ns);
    }
  },
});

Deno.test({
  name: "nftRulesIntact() changes nothing in the kernel",
  ignore: gate.ignore,
  async fn() {
    const ns = `knp-${shortId()}-watch`;
    try {
      await createNamespace(ns);
      await applyNft(await Deno.readTextFile(GOLDEN), { netns: ns });
      const before = await runNft(["-a", "list", "ruleset"], { netns: ns });
      for (let i = 0; i < 3; i++) {
        assert.equal(await nftRulesIntact("kube-nftproxy", { netns: ns }), true);
      }
      const after = await runNft(["-a", "list", "ruleset"], { netns: ns });
      assert.equal(after.stdout, before.stdout);
    } finally {
      await deleteNamespace(ns);
    }
  },
});

Deno.test({
  name: "nftRulesIntactNetlink() reads the dispatch chains over netlink and sees the same " +
    "removals as the nft check, in the kernel",
  ignore: gate.ignore,
  fn: () =>
    withScratch(async (scratch) => {
      const module = JSON.stringify(new URL("./nft_watch.ts", import.meta.url).href);
      const intact = async (families: string[]) =>
        JSON.parse(
          await scratch.evaluate(
            `import { nftRulesIntactNetlink } from ${module};
             console.log(await nftRulesIntactNetlink("kube-nftproxy", ${
              JSON.stringify(families)
            }));`,
          ),
        );
      const golden = await Deno.readTextFile(GOLDEN);
      await scratch.load(golden);
      assert.equal(await intact(["ip", "ip6"]), true);
      await scratch.load("flush chain ip6 kube-nftproxy services\n");
      assert.equal(await intact(["ip", "ip6"]), false);
      assert.equal(await intact(["ip"]), true);
      await scratch.load("flush chain ip kube-nftproxy nat-prerouting\n");
      assert.equal(await intact(["ip"]), false);
      await scratch.load(golden);
      await scratch.load("delete chain ip6 kube-nftproxy nat-prerouting\n");
      assert.equal(await intact(["ip6"]), false);
      await scratch.load("flush ruleset\n");
      assert.equal(await intact(["ip"]), false);
    }),
});
