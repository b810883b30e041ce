/**
 * ClientIP affinity across syncs: after each sync that touches a sticky service, the proxy
 * deletes the affinity entries whose endpoint went away (src/apply/affinity.ts) — and must keep
 * the others, however the node's nft prints them back (protocols as names or numbers).
 *
 * @module
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe } from "../netns/topology.ts";
import { startProxy } from "./proxy_harness.ts";
import { ADDR, semanticsCluster } from "./semantics_cluster.ts";
import { service } from "../fixtures/objects.ts";
import { parseAffinityListing } from "../../src/render/nft/affinity.ts";

const gate = await netnsTestGate();

Deno.test({
  name:
    "ClientIP affinity: a sync removing another endpoint keeps the client's entry and its endpoint",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topo = await createTopology();
    try {
      const objects = semanticsCluster(topo);
      const proxy = await startProxy(topo, objects);
      try {
        const target = `${ADDR.sticky}:80`;
        const [first] = await probe(topo, topo.client.ns, target);
        assert.equal(first.outcome, "ok");
        const stuck = first.outcome === "ok" ? first.body : "";
        const other = topo.pods.find((p) => p.name !== stuck)!;
        // The sticky service's IPv4 slice without an endpoint the client does not stick to.
        const changed = objects.map((o) => {
          const meta = o.metadata as { name?: string };
          if (o.kind !== "EndpointSlice" || meta.name !== "sticky-v4") return o;
          const endpoints = (o.endpoints as { addresses: string[] }[])
            .filter((e) => e.addresses[0] !== other.ip4);
          return { ...o, endpoints };
        });
        await proxy.update(changed);
        // One more sync: the first one's clean-up has finished when it is logged.
        await proxy.update([...changed, service({ name: "late", clusterIPs: ["10.96.0.77"] })]);
        assert.doesNotMatch(proxy.output(), /stale ClientIP affinity entries/);
        const listed = await topo.exec(topo.node.ns, [
          "nft",
          "-j",
          "list",
          "map",
          "ip",
          "kube-nftproxy",
          "affinity",
        ]);
        assert.equal(listed.code, 0, listed.stderr);
        const entries = parseAffinityListing(listed.stdout)
          .filter((e) => e.key.startsWith(`${topo.client.ip4} . `));
        assert.equal(entries.length, 1, listed.stdout);
        const after = (await probe(topo, topo.client.ns, target, { count: 5 }))
          .map((r) => r.outcome === "ok" ? r.body : r.outcome);
        assert.deepEqual(after, Array(5).fill(stuck));
      } finally {
        await proxy.stop();
      }
    } finally {
      await topo.cleanup();
    }
  },
});
