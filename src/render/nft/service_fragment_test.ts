/**
 * Specs of the nft ruleset per Service shape: what a full sync of one Service leaves in the
 * tables — dispatch elements, balancer chains, endpoint elements, verdicts without endpoints,
 * external chains, firewall, hairpin and affinity. Each spec renders through the real planner
 * into {@link NftModel} (proven against the kernel in tests/nft_model_kernel_test.ts) and reads
 * the tables back; no kernel needed.
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, type EndpointSpec, service } from "../../../tests/fixtures/objects.ts";
import { rendered } from "../../../tests/fixtures/model_proxy.ts";
import type { ModelTable } from "../../../tests/nft_model.ts";
import type { ServicePortName } from "../../model/service_port.ts";
import { serviceChainName } from "./names.ts";

const web = (spec: Record<string, unknown> = {}, ports = [{ name: "http", port: 80 }]) =>
  service({ name: "web", clusterIPs: ["10.96.0.10"], ports, spec });
const slice = (endpoints: (string | EndpointSpec)[], name = "web-1") =>
  endpointSlice({ name, service: "web", endpoints });
const REMOTE = (ip: string): EndpointSpec => ({ ip, nodeName: "node-b" });

const WEB_HTTP: ServicePortName = {
  namespace: "default",
  name: "web",
  port: "http",
  protocol: "TCP",
};
const EXTERNAL = serviceChainName("external", WEB_HTTP);

/** The values of an entry point's elements in an endpoint map, by index. */
function endpointsOf(t: ModelTable, map: string, entry: string): string[] {
  const found = t.elements(map).filter((e) => e.key.startsWith(`${entry} . `));
  return found
    .sort((a, b) => Number(a.key.split(" . ").pop()) - Number(b.key.split(" . ").pop()))
    .map((e) => e.value!);
}

Deno.test("renderServicePort(): a ClusterIP with ready endpoints goes to the shared balancer of their count", () => {
  const { ip } = rendered([web(), slice(["10.244.1.12", REMOTE("10.244.2.11")])]);
  assert.deepEqual(ip.keys("cluster-ips"), ["10.96.0.10"]);
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto lb-tcp-2");
  // One balancer per endpoint count: entry points by address first, node ports by port alone.
  assert.deepEqual(ip.rules("lb-tcp-2"), [
    "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @cluster-endpoints-tcp",
    "dnat ip to meta l4proto . th dport . numgen random mod 2 map @cluster-nodeport-endpoints-tcp",
  ]);
  // Indexed by address order, whatever the slice's order.
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.12 . 8080",
    "10.244.2.11 . 8080",
  ]);
  assert.deepEqual(ip.keys("no-endpoint-services"), []);
  assert.deepEqual(ip.keys("local-endpoints-tcp"), [], "no local traffic policy");
});

Deno.test("renderServicePort(): a hairpin entry for each endpoint on this node, none for others", () => {
  const { ip } = rendered([web(), slice(["10.244.1.12", REMOTE("10.244.2.11")])]);
  assert.deepEqual(ip.keys("hairpin-endpoints"), ["10.244.1.12 . 10.244.1.12"]);
});

Deno.test("renderServicePort(): a ClusterIP without endpoints is rejected, and still a cluster IP", () => {
  const { ip } = rendered([web()]);
  assert.equal(ip.lookup("no-endpoint-services", "10.96.0.10 . tcp . 80"), "goto reject-chain");
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), undefined);
  assert.deepEqual(ip.keys("cluster-ips"), ["10.96.0.10"]);
  assert.deepEqual(ip.rules("reject-chain"), ["reject"]);
});

Deno.test("renderServicePort(): without a ready endpoint, serving terminating ones take the traffic", () => {
  const { ip } = rendered([
    web(),
    slice([
      { ip: "10.244.1.11", ready: false, serving: true, terminating: true },
      { ip: "10.244.1.12", ready: false, serving: false, terminating: true },
    ]),
  ]);
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto lb-tcp-1");
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.11 . 8080",
  ]);
  // A ready endpoint wins over every terminating one.
  const { ip: ready } = rendered([
    web(),
    slice(["10.244.1.13", { ip: "10.244.1.11", ready: false, serving: true, terminating: true }]),
  ]);
  assert.deepEqual(endpointsOf(ready, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.13 . 8080",
  ]);
});

Deno.test("renderServicePort(): endpoints none of which may serve are as good as none: rejected", () => {
  const { ip } = rendered([web(), slice([{ ip: "10.244.1.11", ready: false, serving: false }])]);
  assert.equal(ip.lookup("no-endpoint-services", "10.96.0.10 . tcp . 80"), "goto reject-chain");
});

Deno.test("renderServicePort(): internalTrafficPolicy Local uses this node's endpoints, and drops without one", () => {
  const local = { internalTrafficPolicy: "Local" };
  const { ip } = rendered([web(local), slice(["10.244.1.11", REMOTE("10.244.2.11")])]);
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto local-lb-tcp-1");
  assert.deepEqual(ip.rules("local-lb-tcp-1"), [
    "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 1 map @local-endpoints-tcp",
    "dnat ip to meta l4proto . th dport . numgen random mod 1 map @local-nodeport-endpoints-tcp",
  ]);
  assert.deepEqual(endpointsOf(ip, "local-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.11 . 8080",
  ]);
  assert.deepEqual(ip.keys("cluster-endpoints-tcp"), []);
  // Endpoints elsewhere only: dropped (not rejected), as upstream.
  const { ip: remote } = rendered([web(local), slice([REMOTE("10.244.2.11")])]);
  assert.equal(remote.lookup("no-endpoint-services", "10.96.0.10 . tcp . 80"), "drop");
  assert.equal(remote.lookup("service-ips", "10.96.0.10 . tcp . 80"), undefined);
});

Deno.test("renderServicePort(): UDP and SCTP ports use their own protocol's balancers and maps", () => {
  const ports = [
    { name: "dns", port: 53, protocol: "UDP" as const },
    { name: "assoc", port: 80, protocol: "SCTP" as const },
  ];
  const { ip } = rendered([
    web({}, ports),
    endpointSlice({
      name: "web-1",
      service: "web",
      ports: [{ name: "dns", port: 5353, protocol: "UDP" }, {
        name: "assoc",
        port: 8080,
        protocol: "SCTP",
      }],
      endpoints: ["10.244.1.11"],
    }),
  ]);
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . udp . 53"), "goto lb-udp-1");
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . sctp . 80"), "goto lb-sctp-1");
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-udp", "10.96.0.10 . udp . 53"), [
    "10.244.1.11 . 5353",
  ]);
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-sctp", "10.96.0.10 . sctp . 80"), [
    "10.244.1.11 . 8080",
  ]);
  assert.match(ip.rules("lb-udp-1")[0], /map @cluster-endpoints-udp$/);
  assert.deepEqual(ip.keys("cluster-endpoints-tcp"), []);
});

Deno.test("renderServicePort(): a NodePort (eTP Cluster) is served on the node's addresses through its masquerading external chain", () => {
  const nodePort = service({
    name: "web",
    type: "NodePort",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
  });
  const { ip } = rendered([nodePort, slice(["10.244.1.11", REMOTE("10.244.2.11")])]);
  assert.deepEqual(ip.keys("nodeport-ips"), ["192.168.77.1"]);
  assert.equal(ip.lookup("service-nodeports", "tcp . 30080"), `goto ${EXTERNAL}`);
  assert.deepEqual(ip.rules(EXTERNAL), ["jump mark-for-masquerade", "goto lb-tcp-2"]);
  // Node-port endpoints are keyed by port alone: any address that takes node ports reaches them.
  assert.deepEqual(endpointsOf(ip, "cluster-nodeport-endpoints-tcp", "tcp . 30080"), [
    "10.244.1.11 . 8080",
    "10.244.2.11 . 8080",
  ]);
  // The cluster IP is not masqueraded by the external chain: it goes to the balancer.
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto lb-tcp-2");
});

Deno.test("renderServicePort(): a NodePort without endpoints is rejected on its node port and cluster IP", () => {
  const nodePort = service({
    name: "web",
    type: "NodePort",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
  });
  const { ip } = rendered([nodePort]);
  assert.equal(ip.lookup("no-endpoint-nodeports", "tcp . 30080"), "goto reject-chain");
  assert.equal(ip.lookup("no-endpoint-services", "10.96.0.10 . tcp . 80"), "goto reject-chain");
  assert.equal(ip.lookup("service-nodeports", "tcp . 30080"), undefined);
  assert.equal(ip.chain(EXTERNAL), undefined, "no external chain without endpoints");
});

Deno.test("renderServicePort(): external IPs and load-balancer IPs go through the external chain; ipMode Proxy gets no rules", () => {
  const lb = service({
    name: "web",
    type: "LoadBalancer",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
    spec: { externalIPs: ["192.0.2.7"] },
    status: {
      loadBalancer: { ingress: [{ ip: "203.0.113.9" }, { ip: "203.0.113.10", ipMode: "Proxy" }] },
    },
  });
  const { ip } = rendered([lb, slice(["10.244.1.11"])]);
  assert.equal(ip.lookup("service-ips", "192.0.2.7 . tcp . 80"), `goto ${EXTERNAL}`);
  assert.equal(ip.lookup("service-ips", "203.0.113.9 . tcp . 80"), `goto ${EXTERNAL}`);
  assert.equal(ip.lookup("service-ips", "203.0.113.10 . tcp . 80"), undefined, "ipMode Proxy");
  for (const entry of ["192.0.2.7 . tcp . 80", "203.0.113.9 . tcp . 80"]) {
    assert.deepEqual(endpointsOf(ip, "cluster-endpoints-tcp", entry), ["10.244.1.11 . 8080"]);
  }
  assert.deepEqual(ip.keys("firewall-ips"), [], "no source ranges, no firewall");
});

Deno.test("renderServicePort(): externalTrafficPolicy Local keeps external clients on this node's endpoints, unmasqueraded", () => {
  const lb = service({
    name: "web",
    type: "LoadBalancer",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
    spec: { externalTrafficPolicy: "Local" },
    status: { loadBalancer: { ingress: [{ ip: "203.0.113.9" }] } },
  });
  const { ip } = rendered([lb, slice(["10.244.1.11", REMOTE("10.244.2.11")])]);
  // Pods (cluster CIDR) and the node itself short-circuit to every endpoint; the rest stays local.
  assert.deepEqual(ip.rules(EXTERNAL), [
    "ip saddr 10.244.0.0/16 goto lb-tcp-2",
    "fib saddr type local jump mark-for-masquerade",
    "fib saddr type local goto lb-tcp-2",
    "goto local-lb-tcp-1",
  ]);
  for (
    const [local, cluster, entry] of [
      ["local-endpoints-tcp", "cluster-endpoints-tcp", "203.0.113.9 . tcp . 80"],
      ["local-nodeport-endpoints-tcp", "cluster-nodeport-endpoints-tcp", "tcp . 30080"],
    ]
  ) {
    assert.deepEqual(endpointsOf(ip, local, entry), ["10.244.1.11 . 8080"]);
    assert.deepEqual(endpointsOf(ip, cluster, entry), ["10.244.1.11 . 8080", "10.244.2.11 . 8080"]);
  }
  // The cluster IP follows internalTrafficPolicy (Cluster): every endpoint.
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto lb-tcp-2");
  // No endpoint on this node: external clients are dropped, pods and the node still served.
  const { ip: remote } = rendered([lb, slice([REMOTE("10.244.2.11")])]);
  assert.deepEqual(remote.rules(EXTERNAL), [
    "ip saddr 10.244.0.0/16 goto lb-tcp-1",
    "fib saddr type local jump mark-for-masquerade",
    "fib saddr type local goto lb-tcp-1",
    "drop",
  ]);
});

Deno.test("renderServicePort(): loadBalancerSourceRanges guard the LB IPs with the outermost ranges, trimmed", () => {
  const lb = (ranges: string[], ingress = "203.0.113.9") =>
    service({
      name: "web",
      type: "LoadBalancer",
      clusterIPs: ["10.96.0.10"],
      ports: [{ name: "http", port: 80, nodePort: 30080 }],
      spec: { externalIPs: ["192.0.2.7"], loadBalancerSourceRanges: ranges },
      status: { loadBalancer: { ingress: [{ ip: ingress }] } },
    });
  const { ip } = rendered([
    lb([" 198.51.100.0/24", "198.51.100.128/25 ", "10.0.0.0/8"]),
    slice(["10.244.1.11"]),
  ]);
  assert.deepEqual(ip.keys("firewall-ips"), ["203.0.113.9 . tcp . 80"], "LB IPs only");
  assert.deepEqual(ip.keys("firewall-allow"), [
    "203.0.113.9 . tcp . 80 . 10.0.0.0/8",
    "203.0.113.9 . tcp . 80 . 198.51.100.0/24",
  ]);
  // The node inside a range: traffic with the LB IP as its source (assigned here) is allowed.
  const { ip: inside } = rendered([lb(["192.168.0.0/16"]), slice(["10.244.1.11"])]);
  assert.deepEqual(inside.keys("firewall-allow"), [
    "203.0.113.9 . tcp . 80 . 192.168.0.0/16",
    "203.0.113.9 . tcp . 80 . 203.0.113.9",
  ]);
});

Deno.test("renderServicePort(): ClientIP affinity (IPv4) looks the client up in the affinity map first, then records its pick", () => {
  const sticky = {
    sessionAffinity: "ClientIP",
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } },
  };
  const { ip } = rendered([web(sticky), slice(["10.244.1.11", "10.244.1.12"])]);
  assert.equal(ip.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto sticky-lb-tcp-2");
  // The service port's id rides in meta priority: client . id finds the endpoint it stuck to,
  // whichever entry point (cluster IP or node port) the client used.
  assert.deepEqual(ip.rules("sticky-lb-tcp-2"), [
    "meta priority none meta priority set ip daddr . meta l4proto . th dport map @affinity-ids",
    "meta priority none meta priority set meta l4proto . th dport map @affinity-nodeport-ids",
    "meta l4proto tcp dnat ip to ip saddr . meta priority map @affinity",
    "goto lb-tcp-2",
  ]);
  const id = ip.lookup("affinity-ids", "10.96.0.10 . tcp . 80");
  assert.match(String(id), /^[0-9a-f]{4}:[0-9a-f]{4}$/);
  assert.match(
    ip.rules("affinity-600")[0],
    /update @affinity \{ ip saddr \. meta priority timeout 600s : ip daddr \. tcp dport \}$/,
  );
  assert.equal(ip.rules("affinity-600").at(-1), "meta priority set none");
  assert.deepEqual(ip.keys("affinity"), [], "filled by the packet path, not by syncs");
});

Deno.test("renderServicePort(): a dual-stack Service is in both tables, an IPv4-only one in ip only", () => {
  const { ip, ip6 } = rendered([
    service({ name: "web", clusterIPs: ["10.96.0.10", "fd00:10:96::a"] }),
    service({ name: "v4", clusterIPs: ["10.96.0.20"] }),
    slice(["10.244.1.11"]),
    endpointSlice({
      name: "web-v6",
      service: "web",
      addressType: "IPv6",
      endpoints: ["fd00:10:244:1::11"],
    }),
  ]);
  assert.deepEqual(ip.keys("cluster-ips"), ["10.96.0.10", "10.96.0.20"]);
  assert.deepEqual(ip6.keys("cluster-ips"), ["fd00:10:96::a"]);
  assert.equal(ip6.lookup("service-ips", "fd00:10:96::a . tcp . 80"), "goto lb-tcp-1");
  assert.deepEqual(endpointsOf(ip6, "cluster-endpoints-tcp", "fd00:10:96::a . tcp . 80"), [
    "fd00:10:244:1::11 . 8080",
  ]);
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.11 . 8080",
  ]);
});

Deno.test("renderServicePort(): ClientIP affinity in IPv6 remembers clients in a dynamic set per endpoint", () => {
  const { ip6 } = rendered([
    service({
      name: "web",
      clusterIPs: ["fd00:10:96::a"],
      spec: { sessionAffinity: "ClientIP" },
    }),
    endpointSlice({
      name: "web-v6",
      service: "web",
      addressType: "IPv6",
      endpoints: ["fd00:10:244:1::11", "fd00:10:244:1::12"],
    }),
  ]);
  const sticky = serviceChainName("sticky", WEB_HTTP);
  assert.equal(ip6.lookup("service-ips", "fd00:10:96::a . tcp . 80"), `goto ${sticky}`);
  const ids = ["[fd00:10:244:1::11]:8080", "[fd00:10:244:1::12]:8080"];
  const sets = ids.map((id) => serviceChainName("affinity", WEB_HTTP, id));
  const chains = ids.map((id) => serviceChainName("endpoint", WEB_HTTP, id));
  assert.deepEqual(ip6.rules(sticky), [
    `ip6 saddr @${sets[0]} goto ${chains[0]}`,
    `ip6 saddr @${sets[1]} goto ${chains[1]}`,
    `numgen random mod 2 == 0 goto ${chains[0]}`,
    `goto ${chains[1]}`,
  ]);
  for (const [i, id] of ids.entries()) {
    assert.match(
      ip6.set(sets[i])?.spec ?? "",
      /^type ipv6_addr; flags dynamic,timeout; timeout 10800s;/,
    );
    assert.deepEqual(ip6.rules(chains[i]), [
      `update @${sets[i]} { ip6 saddr }`,
      `meta l4proto tcp dnat ip6 to ${id}`,
    ]);
  }
});

Deno.test("renderServicePort(): zone hints narrow cluster endpoints to this node's zone when every endpoint has them", () => {
  const hinted = (zones: string[][]) =>
    slice(zones.map((forZones, i) => ({ ip: `10.244.1.${11 + i}`, hints: { forZones } })));
  const { ip } = rendered([web(), hinted([["z1"], ["z2"], ["z1", "z2"]])]);
  assert.deepEqual(endpointsOf(ip, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80"), [
    "10.244.1.11 . 8080",
    "10.244.1.13 . 8080",
  ]);
  // One endpoint without hints: hints are ignored.
  const { ip: partly } = rendered([
    web(),
    slice([{ ip: "10.244.1.11", hints: { forZones: ["z2"] } }, "10.244.1.12"]),
  ]);
  assert.equal(endpointsOf(partly, "cluster-endpoints-tcp", "10.96.0.10 . tcp . 80").length, 2);
});
