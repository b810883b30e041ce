import assert from "node:assert/strict";
import {
  createNamespace,
  deleteNamespace,
  netnsTestGate,
  shortId,
} from "../../tests/netns/netns.ts";
import { writeNftWithoutIPv6 } from "../../tests/fixtures/nft_without_ipv6.ts";
import { NoIPv4Error } from "./families.ts";
import { iptablesFamilySupport } from "./iptables.ts";
import { nftFamilySupport, runNft } from "./nft.ts";

const gate = await netnsTestGate();

Deno.test({
  name:
    "nftFamilySupport() leaves out the family a kernel refuses, changing nothing, and gives up without IPv4",
  ignore: gate.ignore,
  async fn() {
    const ns = `knp-${shortId()}-fam`;
    const dir = await Deno.makeTempDir({ prefix: "knp-fam-" });
    try {
      await createNamespace(ns);
      assert.deepEqual(await nftFamilySupport("kube-nftproxy", { netns: ns }), {
        usable: ["ip", "ip6"],
        refused: [],
      });
      const withoutIPv6 = await nftFamilySupport("kube-nftproxy", {
        netns: ns,
        nftPath: await writeNftWithoutIPv6(dir),
      });
      assert.deepEqual(withoutIPv6.usable, ["ip"]);
      assert.equal(withoutIPv6.refused[0].family, "ip6");
      assert.match(withoutIPv6.refused[0].reason, /Address family not supported/);
      const listed = await runNft(["list", "ruleset"], { netns: ns });
      assert.equal(listed.stdout.trim(), "", "probing created nothing");
      await assert.rejects(
        nftFamilySupport("kube-nftproxy", { netns: ns, nftPath: "/nonexistent/nft" }),
        NoIPv4Error,
      );
    } finally {
      await deleteNamespace(ns);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "iptablesFamilySupport() finds both families' nat and mangle tables with either back end",
  ignore: gate.ignore,
  async fn() {
    const ns = `knp-${shortId()}-fam`;
    try {
      await createNamespace(ns);
      for (const backend of ["nft", "legacy"] as const) {
        assert.deepEqual(await iptablesFamilySupport({ backend, netns: ns }), {
          usable: ["IPv4", "IPv6"],
          refused: [],
        });
      }
    } finally {
      await deleteNamespace(ns);
    }
  },
});
