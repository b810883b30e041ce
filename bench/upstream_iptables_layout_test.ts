import assert from "node:assert/strict";
import { BENCH_POD_CIDR, clusterEvents, generateCluster } from "./cluster.ts";
import { loadState } from "./state.ts";
import { renderUpstreamIptablesLayout } from "./upstream_iptables_layout.ts";

function stateOf(services: number, endpoints: number) {
  const cluster = generateCluster({ services, endpoints });
  const state = loadState(cluster.nodeName, clusterEvents(cluster));
  state.takeChanges();
  return state;
}

Deno.test("renderUpstreamIptablesLayout() writes a KUBE-SVC chain per service and a KUBE-SEP chain per endpoint, declared before any rule", () => {
  const script = renderUpstreamIptablesLayout(stateOf(2, 3), { clusterCIDR: BENCH_POD_CIDR });
  const lines = script.split("\n");
  const nat = lines.slice(lines.indexOf("*nat"));
  const declared = nat.filter((l) => l.startsWith(":KUBE-"));
  assert.equal(declared.filter((l) => l.startsWith(":KUBE-SVC-")).length, 2);
  assert.equal(declared.filter((l) => l.startsWith(":KUBE-SEP-")).length, 6);
  const firstRule = nat.findIndex((l) => l.startsWith("-A "));
  assert.ok(nat.findLastIndex((l) => l.startsWith(":")) < firstRule);
  // The probability cascade over three endpoints, and each endpoint's DNAT.
  assert.equal(nat.filter((l) => l.includes("--probability 0.3333333333")).length, 2);
  assert.equal(nat.filter((l) => l.includes("-j DNAT --to-destination")).length, 6);
  assert.match(nat.at(-3)!, /-j KUBE-NODEPORTS$/);
});

Deno.test("renderUpstreamIptablesLayout() drops per-endpoint comments above 1,000 endpoints, as upstream", () => {
  const small = renderUpstreamIptablesLayout(stateOf(10, 10), { clusterCIDR: BENCH_POD_CIDR });
  const large = renderUpstreamIptablesLayout(stateOf(101, 10), { clusterCIDR: BENCH_POD_CIDR });
  const sepComments = (s: string) =>
    s.split("\n").filter((l) => l.startsWith("-A KUBE-SEP-") && l.includes("--comment")).length;
  assert.equal(sepComments(small), 200);
  assert.equal(sepComments(large), 0);
  const forced = renderUpstreamIptablesLayout(stateOf(101, 10), {
    clusterCIDR: BENCH_POD_CIDR,
    comments: true,
  });
  assert.equal(sepComments(forced), 2020);
});
