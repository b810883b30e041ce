/**
 * Data-plane spec of a node whose kernel refuses IPv6 rules (booted with `ipv6.disable=1`; here
 * an `nft` stand-in answers every `ip6` command the way such a kernel does): the proxy says so
 * once, programs IPv4 only, and IPv4 services work — rather than failing every sync on the
 * `ip6` half of its one transaction.
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import {
  POD_CIDR_V4,
  POD_CIDR_V6,
  POD_PORT,
  SERVICE_CIDR_V4,
  SERVICE_CIDR_V6,
} from "../fixtures/ip_plan.ts";
import { writeNftWithoutIPv6 } from "../fixtures/nft_without_ipv6.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe } from "../netns/topology.ts";
import { countLines, MAIN, startProxy } from "./proxy_harness.ts";
import { probesToReachAll } from "./semantics_cases.ts";
import { runNft } from "../../src/apply/nft.ts";

const gate = await netnsTestGate();

Deno.test({
  name:
    "a kernel that refuses IPv6 rules gets IPv4 rules only, with one warning, and IPv4 services work",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.assertUsable();
    const topo = await createTopology();
    const dir = await Deno.makeTempDir({ prefix: "knp-v4only-" });
    try {
      const ports = [{ name: "http", port: POD_PORT }];
      const nft = await writeNftWithoutIPv6(dir);
      const proxy = await startProxy(topo, [
        node("node-a", { ips: [topo.node.ip4] }),
        serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
        service({ name: "web", clusterIPs: ["10.96.0.10", "fd00:10:96::10"] }),
        endpointSlice({
          name: "web-v4",
          service: "web",
          ports,
          endpoints: topo.pods.map((p) => p.ip4),
        }),
        endpointSlice({
          name: "web-v6",
          service: "web",
          addressType: "IPv6",
          ports,
          endpoints: topo.pods.map((p) => p.ip6!),
        }),
      ], {
        env: { KUBE_NFTPROXY_NFT: nft },
        args: ["--nftables-sync-period=1s", "-v=4"],
      });
      try {
        const seen = await probe(topo, topo.client.ns, "10.96.0.10:80", {
          count: probesToReachAll(topo.pods.length),
        });
        const reached = new Set(seen.map((r) => r.outcome === "ok" ? r.body : r.outcome));
        assert.deepEqual(reached, new Set(topo.pods.map((p) => p.name)));
        const tables = (await runNft(["list", "tables"], { netns: topo.node.ns })).stdout;
        assert.match(tables, /^table ip kube-nftproxy$/m);
        assert.doesNotMatch(tables, /^table ip6 kube-nftproxy$/m);
        // Periodic syncs (every second here; -v=4 logs them even when they send nothing) go on
        // without errors: two more after the ones so far.
        const syncs = countLines(proxy.output(), /\bsynced (fully|partially): /);
        await proxy.waitForLog(/\bsynced (fully|partially): /, syncs + 2);
        const log = proxy.output();
        assert.equal(log.match(/refuses ip6 rules/g)?.length, 1, log);
        assert.doesNotMatch(log, /sync failed|removed or flushed/, log);
        // A dry run on this node diffs the family it programs, not an ip6 table it never could.
        const dry = await topo.exec(topo.node.ns, [
          Deno.execPath(),
          "run",
          "--cached-only",
          "-A",
          MAIN,
          `--from-file=${proxy.file}`,
          "--hostname-override=node-a",
          `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
          "--dry-run",
        ], { env: { KUBE_NFTPROXY_NFT: nft }, timeoutMs: 60_000 });
        assert.equal(dry.code, 0, dry.stderr);
        assert.equal(dry.stdout.split("\n")[0], "# ip kube-nftproxy: no change", dry.stdout);
        assert.doesNotMatch(dry.stdout, /ip6/);
        // And explain --live finds the IPv4 rules it explains in the kernel.
        const explained = await topo.exec(topo.node.ns, [
          Deno.execPath(),
          "run",
          "--cached-only",
          "-A",
          MAIN,
          "explain",
          `--from=${topo.client.ip4}`,
          "--to=10.96.0.10:80/tcp",
          "--live",
          `--from-file=${proxy.file}`,
          "--hostname-override=node-a",
          `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
        ], { env: { KUBE_NFTPROXY_NFT: nft }, timeoutMs: 60_000 });
        assert.equal(explained.code, 0, explained.stderr);
        assert.match(explained.stdout, /^kernel: +the live rules are these/m, explained.stdout);
      } finally {
        await proxy.stop();
      }
    } finally {
      await topo.cleanup();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
