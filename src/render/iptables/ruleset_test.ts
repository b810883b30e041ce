import assert from "node:assert/strict";
import { type Config, DEFAULT_CONFIG } from "../../config/config.ts";
import type { IPFamily } from "../../model/service_port.ts";
import type { RawObject } from "../../source/events.ts";
import { ProxyState } from "../../tracker/proxy_state.ts";
import { endpointSlice, node, service, serviceCIDR } from "../../../tests/fixtures/objects.ts";
import { iptablesRenderOptions } from "./options.ts";
import { probability, renderFixedChains, renderServicePort } from "./ruleset.ts";

const CONFIG: Config = {
  ...DEFAULT_CONFIG,
  hostname: "node-a",
  clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
};

/** The state of a node `node-a` (192.168.77.1, fd00:77::1) plus `objects`. */
function stateOf(objects: RawObject[]): ProxyState {
  const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
  state.onEvent({
    kind: "Node",
    current: node("node-a", { ips: ["192.168.77.1", "fd00:77::1"], podCIDRs: ["10.244.1.0/24"] }),
  });
  state.onEvent({ kind: "ServiceCIDR", current: serviceCIDR("k", ["10.96.0.0/16"]) });
  for (const current of objects) {
    state.onEvent({ kind: current.kind as "Service" | "EndpointSlice", current });
  }
  state.takeChanges();
  return state;
}

/** Every rule line the first service port of `objects` renders, shared rules first. */
function rules(
  objects: RawObject[],
  options: { config?: Partial<Config>; family?: IPFamily; totalEndpoints?: number } = {},
): string[] {
  const state = stateOf(objects);
  const family = options.family ?? "IPv4";
  const opts = iptablesRenderOptions({ ...CONFIG, ...options.config }, {
    node: state.node,
    serviceCIDRs: state.serviceCIDRs,
    totalEndpoints: options.totalEndpoints,
  }, family);
  const [key, port] = [...state.services][0];
  const fragment = renderServicePort(port, state.endpoints.get(key) ?? [], opts);
  if (fragment === null) return [];
  return [...fragment.shared.map((r) => r.rule), ...[...fragment.chains.values()].flat()];
}

const web = (spec: Partial<Parameters<typeof service>[0]> = {}) =>
  service({ name: "web", clusterIPs: ["10.96.0.10"], ...spec });
const slice = (endpoints: Parameters<typeof endpointSlice>[0]["endpoints"], name = "web-1") =>
  endpointSlice({ name, service: "web", endpoints });

Deno.test("probability() prints 1/n with ten decimals like upstream's %0.10f", () => {
  assert.equal(probability(1), "1.0000000000");
  assert.equal(probability(2), "0.5000000000");
  assert.equal(probability(3), "0.3333333333");
  assert.equal(probability(7), "0.1428571429");
  // 1/2048 = 0.00048828125 exactly: Go rounds the tie to even.
  assert.equal(probability(2048), "0.0004882812");
});

Deno.test("renderServicePort() balances a ClusterIP over its endpoints with a statistic cascade", () => {
  const lines = rules([web(), slice(["10.244.1.11", "10.244.1.12", "10.244.2.13"])]);
  const svc = lines.filter((l) => l.startsWith("-A KUBE-SVC-") && l.includes(" -> "));
  assert.deepEqual(svc.map((l) => /--probability (\S+)/.exec(l)?.[1] ?? "last"), [
    "0.3333333333",
    "0.5000000000",
    "last",
  ]);
  assert.ok(
    lines.includes(
      '-A KUBE-SERVICES -m comment --comment "default/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KUBE-SVC-CDGGSHYLG3RE2FKL',
    ),
  );
  // Off-cluster sources are masqueraded; the endpoint chain masquerades hairpin traffic.
  assert.ok(lines.some((l) => l.includes("--dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ")));
  assert.ok(lines.some((l) => /^-A KUBE-SEP-\S+ .* -s 10\.244\.2\.13 -j KUBE-MARK-MASQ$/.test(l)));
  assert.ok(
    lines.some((l) => l.endsWith("-m tcp -p tcp -j DNAT --to-destination 10.244.2.13:8080")),
  );
});

Deno.test("renderServicePort() rejects a service without endpoints in the filter table", () => {
  const lines = rules([
    web({
      type: "NodePort",
      ports: [{ name: "http", port: 80, nodePort: 30080 }],
      spec: { externalIPs: ["203.0.113.10"] },
    }),
  ]);
  assert.deepEqual(lines, [
    '-A KUBE-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j REJECT',
    '-A KUBE-EXTERNAL-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 203.0.113.10 --dport 80 -j REJECT',
    '-A KUBE-EXTERNAL-SERVICES -m comment --comment "default/web:http has no endpoints" -m tcp -p tcp -d 192.168.77.1 --dport 30080 -j REJECT',
  ]);
});

Deno.test("renderServicePort() drops internalTrafficPolicy Local traffic without a local endpoint", () => {
  const lines = rules([
    web({ spec: { internalTrafficPolicy: "Local" } }),
    slice([{ ip: "10.244.2.13", nodeName: "node-b" }]),
  ]);
  assert.deepEqual(lines, [
    '-A KUBE-SERVICES -m comment --comment "default/web:http has no local endpoints" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j DROP',
  ]);
});

Deno.test("renderServicePort() short-circuits pods and the node under externalTrafficPolicy Local", () => {
  const lines = rules([
    web({
      type: "NodePort",
      ports: [{ name: "http", port: 80, nodePort: 30081 }],
      spec: { externalTrafficPolicy: "Local" },
    }),
    slice(["10.244.1.11", { ip: "10.244.2.13", nodeName: "node-b" }]),
  ]);
  const ext = lines.filter((l) => l.startsWith("-A KUBE-EXT-"));
  assert.deepEqual(ext.map((l) => l.replace(/^-A \S+ (-m comment --comment "[^"]*" )?/, "")), [
    "-s 10.244.0.0/16 -j KUBE-SVC-CDGGSHYLG3RE2FKL",
    "-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ",
    "-m addrtype --src-type LOCAL -j KUBE-SVC-CDGGSHYLG3RE2FKL",
    "-j KUBE-SVL-CDGGSHYLG3RE2FKL",
  ]);
  const svl = lines.filter((l) => l.startsWith("-A KUBE-SVL-"));
  assert.equal(svl.length, 1, "only the local endpoint");
  assert.ok(
    lines.includes(
      '-A KUBE-NODEPORTS -m comment --comment "default/web:http" -m tcp -p tcp --dport 30081 -j KUBE-EXT-CDGGSHYLG3RE2FKL',
    ),
  );
});

Deno.test("renderServicePort() drops external traffic under eTP Local without a local endpoint", () => {
  const lines = rules([
    web({
      type: "NodePort",
      ports: [{ name: "http", port: 80, nodePort: 30082 }],
      spec: { externalTrafficPolicy: "Local" },
    }),
    slice([{ ip: "10.244.2.13", nodeName: "node-b" }]),
  ]);
  assert.ok(!lines.some((l) => l.includes("-j KUBE-SVL-")), "no local policy chain");
  assert.ok(
    lines.includes(
      '-A KUBE-EXTERNAL-SERVICES -m comment --comment "default/web:http has no local endpoints" -m tcp -p tcp -d 192.168.77.1 --dport 30082 -j DROP',
    ),
  );
  assert.ok(lines.some((l) => /^-A KUBE-EXT-\S+ .*-s 10\.244\.0\.0\/16 -j KUBE-SVC-/.test(l)));
});

Deno.test("renderServicePort() firewalls LB IPs by loadBalancerSourceRanges, allowing the node", () => {
  const lines = rules([
    web({
      type: "LoadBalancer",
      ports: [{ name: "http", port: 80, nodePort: 30083 }],
      spec: { loadBalancerSourceRanges: [" 192.168.77.0/24 "] },
      status: { loadBalancer: { ingress: [{ ip: "203.0.113.20" }] } },
    }),
    slice(["10.244.1.11"]),
  ]);
  const fw = lines.filter((l) => l.startsWith("-A KUBE-FW-"));
  assert.deepEqual(fw.map((l) => l.replace(/^-A \S+ -m comment --comment "[^"]*" ?/, "")), [
    "-s 192.168.77.0/24 -j KUBE-EXT-CDGGSHYLG3RE2FKL",
    "-s 203.0.113.20 -j KUBE-EXT-CDGGSHYLG3RE2FKL",
    "",
  ]);
  assert.ok(
    lines.some((l) => /^-A KUBE-SERVICES .* -d 203\.0\.113\.20 --dport 80 -j KUBE-FW-/.test(l)),
  );
  assert.ok(
    lines.some((l) => /^-A KUBE-PROXY-FIREWALL .* -d 203\.0\.113\.20 --dport 80 -j DROP$/.test(l)),
  );
  // Node ports are not limited by the ranges (upstream's rule).
  assert.ok(lines.some((l) => /^-A KUBE-NODEPORTS .*--dport 30083 -j KUBE-EXT-/.test(l)));
});

Deno.test("renderServicePort() keeps ClientIP affinity with the recent module", () => {
  const lines = rules([
    web({
      spec: {
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      },
    }),
    slice(["10.244.1.11", "10.244.1.12"]),
  ]);
  const checks = lines.filter((l) => l.includes("--rcheck"));
  assert.equal(checks.length, 2);
  for (const check of checks) {
    const sep = /-j (KUBE-SEP-\S+)$/.exec(check)![1];
    assert.ok(check.includes(`-m recent --name ${sep} --rcheck --seconds 60 --reap -j ${sep}`));
    assert.ok(
      lines.some((l) => l.startsWith(`-A ${sep} `) && l.includes(`-m recent --name ${sep} --set`)),
    );
  }
});

Deno.test("renderServicePort() renders IPv6 endpoints in brackets for DNAT", () => {
  const lines = rules([
    web({ clusterIPs: ["10.96.0.10", "fd00:10:96::10"] }),
    endpointSlice({
      name: "web-6",
      service: "web",
      addressType: "IPv6",
      endpoints: ["fd00:10:244:1::11"],
    }),
  ], { family: "IPv6" });
  assert.ok(lines.some((l) => l.endsWith("-j DNAT --to-destination [fd00:10:244:1::11]:8080")));
  assert.ok(lines.some((l) => l.includes("! -s fd00:10:244::/56 -j KUBE-MARK-MASQ")));
});

Deno.test("renderServicePort() masquerades per masqueradeAll and the local-traffic detector", () => {
  const objects = [web(), slice(["10.244.1.11"])];
  const mark = (config: Partial<Config>) =>
    rules(objects, { config }).filter((l) =>
      l.startsWith("-A KUBE-SVC-") && l.endsWith("-j KUBE-MARK-MASQ")
    );
  assert.match(mark({ masqueradeAll: true })[0], /--dport 80 -j KUBE-MARK-MASQ$/);
  assert.deepEqual(mark({ clusterCIDRs: [] }), []);
  assert.match(
    mark({ detectLocalMode: "InterfaceNamePrefix", interfaceNamePrefix: "veth" })[0],
    /--dport 80 ! -i veth\+ -j KUBE-MARK-MASQ$/,
  );
  assert.match(
    mark({ detectLocalMode: "BridgeInterface", bridgeInterface: "cbr0" })[0],
    /--dport 80 ! -i cbr0 -j KUBE-MARK-MASQ$/,
  );
  assert.match(
    mark({ detectLocalMode: "NodeCIDR" })[0],
    /! -s 10\.244\.1\.0\/24 -j KUBE-MARK-MASQ$/,
  );
  // Every source is inside a /0 cluster CIDR: nothing to masquerade (and iptables-nft refuses
  // `! -s 0.0.0.0/0`, which made every sync fail).
  assert.deepEqual(mark({ clusterCIDRs: ["0.0.0.0/0", "::/0"] }), []);
  // Leading zeros are decimal, as in upstream's Go parser; iptables would read them as octal.
  assert.match(
    mark({ clusterCIDRs: ["010.244.0.0/16"] })[0],
    /! -s 10\.244\.0\.0\/16 -j KUBE-MARK-MASQ$/,
  );
});

Deno.test("renderServicePort() drops endpoint comments in large-cluster mode, like upstream", () => {
  const lines = rules([web(), slice(["10.244.1.11", "10.244.1.12"])], { totalEndpoints: 1001 });
  const sep = lines.filter((l) => l.startsWith("-A KUBE-SEP-"));
  assert.equal(sep.length, 4);
  assert.ok(sep.every((l) => !l.includes("--comment")));
  assert.ok(lines.filter((l) => l.includes(" -> ")).length === 0);
});

Deno.test("renderFixedChains() ends KUBE-SERVICES with node ports and checks unused cluster IPs", () => {
  const state = stateOf([web(), slice(["10.244.1.11"])]);
  const options = iptablesRenderOptions(CONFIG, state, "IPv4");
  const [key, port] = [...state.services][0];
  const fixed = renderFixedChains(
    [renderServicePort(port, state.endpoints.get(key)!, options)!],
    options,
  );
  assert.match(fixed.nat.get("KUBE-SERVICES")!.at(-1)!, /-d 192\.168\.77\.1 -j KUBE-NODEPORTS$/);
  assert.deepEqual(fixed.filter.get("KUBE-CLUSTER-IPS"), [
    '-A KUBE-CLUSTER-IPS -m comment --comment "default/web cluster IP" -d 10.96.0.10 -j REJECT',
    '-A KUBE-CLUSTER-IPS -m comment --comment "unallocated service IP" -d 10.96.0.0/16 -j DROP',
  ]);
  assert.match(
    fixed.filter.get("KUBE-SERVICES")!.at(-1)!,
    /-d 10\.96\.0\.0\/16 -j KUBE-CLUSTER-IPS$/,
  );
  assert.deepEqual(fixed.nat.get("KUBE-POSTROUTING"), [
    "-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN",
    "-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000",
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  ]);
});

Deno.test("iptablesRenderOptions() never serves node ports on loopback", () => {
  const options = iptablesRenderOptions(
    { ...CONFIG, bindAddress: "127.0.0.1" },
    { node: null, serviceCIDRs: [] },
    "IPv4",
  );
  assert.deepEqual(options.nodePortIPs, []);
});
