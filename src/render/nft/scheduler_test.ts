/**
 * Specs of the schedulers in the rendered ruleset: which pick each balancer uses, in both
 * families and with ClientIP affinity. The kernel's choices themselves are shown in
 * tests/e2e/scheduler_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, service } from "../../../tests/fixtures/objects.ts";
import { rendered } from "../../../tests/fixtures/model_proxy.ts";
import type { ServicePortName } from "../../model/service_port.ts";
import { serviceChainName } from "./names.ts";
import { endpointPick } from "./scheduler.ts";

const WEB: ServicePortName = { namespace: "default", name: "web", port: "http", protocol: "TCP" };

const dualStack = (spec: Record<string, unknown> = {}) => [
  service({ name: "web", clusterIPs: ["10.96.0.10", "fd00:10:96::a"], spec }),
  endpointSlice({ name: "web-v4", service: "web", endpoints: ["10.244.1.11", "10.244.1.12"] }),
  endpointSlice({
    name: "web-v6",
    service: "web",
    addressType: "IPv6",
    endpoints: ["fd00:10:244:1::11", "fd00:10:244:1::12"],
  }),
];

Deno.test("endpointPick() gives each scheduler's nft expression", () => {
  assert.equal(endpointPick("random", "ip", 3), "numgen random mod 3");
  assert.equal(endpointPick("round-robin", "ip6", 3), "numgen inc mod 3");
  assert.equal(endpointPick("source-hash", "ip", 3), "jhash ip saddr mod 3 seed 0x0");
  assert.equal(endpointPick("source-hash", "ip6", 2), "jhash ip6 saddr mod 2 seed 0x0");
});

Deno.test("renderServicePort(): balancers pick with the configured scheduler in both families", () => {
  const cases = [
    ["random", "numgen random mod 2", "numgen random mod 2"],
    ["round-robin", "numgen inc mod 2", "numgen inc mod 2"],
    ["source-hash", "jhash ip saddr mod 2 seed 0x0", "jhash ip6 saddr mod 2 seed 0x0"],
  ] as const;
  for (const [scheduler, pick4, pick6] of cases) {
    const { ip, ip6 } = rendered(dualStack(), { scheduler });
    assert.deepEqual(ip.rules("lb-tcp-2"), [
      `dnat ip to ip daddr . meta l4proto . th dport . ${pick4} map @cluster-endpoints-tcp`,
      `dnat ip to meta l4proto . th dport . ${pick4} map @cluster-nodeport-endpoints-tcp`,
    ]);
    assert.deepEqual(ip6.rules("lb-tcp-2"), [
      `dnat ip6 to ip6 daddr . meta l4proto . th dport . ${pick6} map @cluster-endpoints-tcp`,
      `dnat ip6 to meta l4proto . th dport . ${pick6} map @cluster-nodeport-endpoints-tcp`,
    ]);
  }
});

Deno.test("renderServicePort(): ClientIP affinity first looks the client up, then picks with the scheduler", () => {
  for (const scheduler of ["round-robin", "source-hash"] as const) {
    const { ip, ip6 } = rendered(dualStack({ sessionAffinity: "ClientIP" }), { scheduler });
    // IPv4: the sticky chain reads the affinity map, then falls through to the plain balancer.
    const sticky4 = ip.rules("sticky-lb-tcp-2");
    assert.equal(sticky4.at(-1), "goto lb-tcp-2");
    assert.ok(sticky4.some((rule) => rule.includes("map @affinity")), sticky4.join("\n"));
    assert.ok(ip.rules("lb-tcp-2")[0].includes(endpointPick(scheduler, "ip", 2)));
    // IPv6: remembered clients first, then one pick among the endpoint chains.
    const ids = ["[fd00:10:244:1::11]:8080", "[fd00:10:244:1::12]:8080"];
    const sets = ids.map((id) => serviceChainName("affinity", WEB, id));
    const chains = ids.map((id) => serviceChainName("endpoint", WEB, id));
    assert.deepEqual(ip6.rules(serviceChainName("sticky", WEB)), [
      `ip6 saddr @${sets[0]} goto ${chains[0]}`,
      `ip6 saddr @${sets[1]} goto ${chains[1]}`,
      `${endpointPick(scheduler, "ip6", 2)} vmap { 0 : goto ${chains[0]}, 1 : goto ${chains[1]} }`,
    ]);
  }
});
