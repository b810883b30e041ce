import assert from "node:assert/strict";
import { parseTraceLine, type TraceEvent } from "./events.ts";
import { parseChainHooks } from "./kernel_text.ts";
import { summarize, type TraceSummary } from "./summary.ts";

const fixture = (name: string) =>
  Deno.readTextFile(new URL(`../../tests/fixtures/trace/${name}`, import.meta.url));

/**
 * Captured in the e2e topology with both releases listening to the same packets: a foreign
 * table `inet knp-firewall` (dropping 203.0.113.10:80) and connections from the client to a
 * cluster IP, an eTP Local node port, a service without endpoints, a source-ranged LB IP and
 * the firewalled external IP.
 */
async function summaries(name: string): Promise<TraceSummary[]> {
  const hooks = parseChainHooks(await fixture("list-chains.txt"));
  const byId = new Map<string, TraceEvent[]>();
  for (const line of (await fixture(name)).split("\n")) {
    const event = parseTraceLine(line);
    if (event === null) continue;
    byId.set(event.id, [...byId.get(event.id) ?? [], event]);
  }
  return [...byId.values()].map((events) =>
    summarize(events, { table: "kube-nftproxy", traceTable: "kube-nftproxy-trace", hooks })!
  );
}

for (const release of ["1.0.6", "1.1.3"]) {
  Deno.test(`summarize() reads what nft ${release} traced, connection by connection`, async () => {
    const [web, nodePort, empty, denied, firewalled] = await summaries(
      `monitor-nft-${release}.txt`,
    );

    assert.deepEqual(web.flow, {
      family: "ipv4",
      protocol: "tcp",
      source: "192.168.77.2",
      sourcePort: 55404,
      destination: "10.96.0.10",
      destinationPort: 80,
    });
    assert.deepEqual(web.hooks, ["prerouting", "forward", "postrouting"]);
    assert.equal(web.verdict, "accepted");
    assert.deepEqual(web.serviceLookup, {
      family: "ip",
      set: "service-ips",
      key: "10.96.0.10 . tcp . 80",
    });
    assert.equal(web.masquerade, true);
    assert.match(
      web.masqueradeReason!,
      /^a source that is not a pod \(off-cluster, or the node itself\) to a cluster IP \(services: /,
    );
    assert.deepEqual(web.dnatSeen, { ip: "10.244.1.12", port: 8080 });
    assert.deepEqual(web.foreignTables, ["inet knp-firewall"]);
    assert.deepEqual(
      web.chains.filter((c) => c.ours).map((c) => c.chain),
      [
        "filter-prerouting",
        "nat-prerouting",
        "services",
        "mark-for-masquerade",
        "services",
        "lb-tcp-3",
        "filter-prerouting-post-dnat",
        "filter-forward",
        "nat-postrouting",
        "masquerading",
      ],
    );

    assert.deepEqual(nodePort.serviceLookup, {
      family: "ip",
      set: "service-nodeports",
      key: "tcp . 30081",
    });
    assert.equal(nodePort.serviceChain, "default/node-port-local:http");
    assert.equal(nodePort.masquerade, false);
    assert.equal(nodePort.verdict, "accepted");

    assert.equal(empty.verdict, "rejected");
    assert.equal(empty.decidedBy?.chain, "reject-chain");
    assert.equal(empty.serviceLookup?.set, "no-endpoint-services");
    assert.equal(empty.masquerade, false, "marked, but never reached postrouting");
    assert.deepEqual(empty.hooks, ["prerouting", "forward"]);

    assert.equal(denied.verdict, "dropped");
    assert.equal(denied.decidedBy?.chain, "firewall-check");
    assert.equal(denied.serviceLookup?.set, "firewall-ips");
    assert.deepEqual(denied.hooks, ["prerouting"]);

    assert.equal(firewalled.verdict, "dropped");
    assert.deepEqual(
      { table: firewalled.decidedBy?.table, ours: firewalled.decidedBy?.ours },
      { table: "inet knp-firewall", ours: false },
    );
    assert.deepEqual(firewalled.chains.filter((c) => c.ours), []);
  });
}

Deno.test("summarize() reads both releases' traces the same", async () => {
  const strip = (s: TraceSummary) => ({ ...s, traceId: "" });
  assert.deepEqual(
    (await summaries("monitor-nft-1.0.6.txt")).map(strip),
    (await summaries("monitor-nft-1.1.3.txt")).map(strip),
  );
});

Deno.test("summarize() has nothing to say without a packet line", () => {
  const event = parseTraceLine(
    "trace id 1 ip kube-nftproxy services rule jump x (verdict jump x)",
  )!;
  assert.equal(
    summarize([event], { table: "kube-nftproxy", traceTable: "t", hooks: new Map() }),
    null,
  );
});
