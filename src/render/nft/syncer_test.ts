import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../config/config.ts";
import { ProxyState } from "../../tracker/proxy_state.ts";
import { endpointSlice, node, service, serviceCIDR } from "../../../tests/fixtures/objects.ts";
import { assertGolden } from "../../../tests/fixtures/golden.ts";
import { kernelGate, withScratch } from "../../../tests/nft_scratch.ts";
import { NftPlanner } from "./planner.ts";

const config = { ...DEFAULT_CONFIG, clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"] };
const GOLDEN = new URL("../../../nft/golden/clusterip.nft", import.meta.url);

/** A small dual-stack cluster: one service with endpoints, one without, one v6 endpoint. */
function smallCluster(): ProxyState {
  const state = new ProxyState({ hostname: "node-a", log: () => {} });
  const events = [
    { kind: "ServiceCIDR" as const, current: serviceCIDR("kubernetes", ["10.96.0.0/16"]) },
    {
      kind: "Service" as const,
      current: service({
        name: "web",
        clusterIPs: ["10.96.0.10", "fd00:10:96::a"],
        ports: [
          { name: "http", port: 80 },
          { name: "dns", port: 53, protocol: "UDP" },
          { name: "assoc", port: 80, protocol: "SCTP" },
        ],
      }),
    },
    { kind: "Service" as const, current: service({ name: "empty", clusterIPs: ["10.96.0.11"] }) },
    {
      kind: "EndpointSlice" as const,
      current: endpointSlice({
        name: "web-v4",
        service: "web",
        ports: [
          { name: "http", port: 8080 },
          { name: "dns", port: 5353, protocol: "UDP" },
          { name: "assoc", port: 8080, protocol: "SCTP" },
        ],
        endpoints: ["10.244.1.12", "10.244.1.11"],
      }),
    },
    {
      kind: "EndpointSlice" as const,
      current: endpointSlice({
        name: "web-v6",
        service: "web",
        addressType: "IPv6",
        endpoints: ["fd00:10:244:1::11"],
      }),
    },
  ];
  events.forEach((e) => state.onEvent(e));
  return state;
}

function sync(state: ProxyState, planner: NftPlanner, full = false): string {
  const { changed, global } = state.takeChanges();
  const plan = planner.plan(state, { full: full || global, changed });
  plan.commit();
  return plan.script;
}

Deno.test({
  name: "NftPlanner renders a small cluster exactly as the golden script, and the kernel loads it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const script = sync(smallCluster(), new NftPlanner(config), true);
    await assertGolden(script, GOLDEN);
    await withScratch(async (k) => {
      await k.load(script);
      await k.load(script); // a first-sync script is re-runnable: it recreates the table
      const listed = await k.list("ip");
      assert.match(
        listed,
        /10\.96\.0\.10 \. tcp \. 80 \. 1 : 10\.244\.1\.12 \. 8080/,
      );
    });
  },
});

Deno.test({
  name: "NftPlanner renders each scheduler's balancers exactly as its golden script, and the " +
    "kernel loads it",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const scheduler of ["round-robin", "source-hash"] as const) {
      const golden = new URL(`../../../nft/golden/clusterip-${scheduler}.nft`, import.meta.url);
      const script = sync(smallCluster(), new NftPlanner({ ...config, scheduler }), true);
      await assertGolden(script, golden);
      await withScratch(async (k) => {
        await k.load(script);
        const listed = await k.list("ip");
        const pick = scheduler === "round-robin"
          ? "numgen inc mod 2"
          : "jhash ip saddr mod 2 seed 0x0";
        assert.ok(listed.includes(`. ${pick} map @cluster-endpoints-tcp`), listed);
      });
    }
  },
});

Deno.test({
  name: "NftPlanner sends nothing when nothing changed",
  fn: () => {
    const state = smallCluster();
    const planner = new NftPlanner(config);
    assert.notEqual(sync(state, planner, true), "");
    assert.equal(sync(state, planner), "", "an empty script: nft is not even run");
  },
});

Deno.test({
  name: "NftPlanner's partial sync touches only the changed service, and the kernel accepts it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const state = smallCluster();
    const planner = new NftPlanner(config);
    const full = sync(state, planner, true);
    state.onEvent({
      kind: "EndpointSlice",
      current: endpointSlice({
        name: "empty-1",
        service: "empty",
        endpoints: ["10.244.1.13"],
      }),
    });
    const partial = sync(state, planner);
    assert.equal(
      partial,
      [
        "add chain ip kube-nftproxy lb-tcp-1",
        "add rule ip kube-nftproxy lb-tcp-1 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 1 map @cluster-endpoints-tcp",
        "add rule ip kube-nftproxy lb-tcp-1 dnat ip to meta l4proto . th dport . numgen random mod 1 map @cluster-nodeport-endpoints-tcp",
        "delete element ip kube-nftproxy no-endpoint-services { 10.96.0.11 . tcp . 80 }",
        'add element ip kube-nftproxy service-ips { 10.96.0.11 . tcp . 80 comment "default/empty:http" : goto lb-tcp-1 }',
        "add element ip kube-nftproxy cluster-endpoints-tcp { 10.96.0.11 . tcp . 80 . 0 : 10.244.1.13 . 8080 }",
        "add element ip kube-nftproxy hairpin-endpoints { 10.244.1.13 . 10.244.1.13 }",
        "",
      ].join("\n"),
    );
    await withScratch(async (k) => {
      await k.load(full);
      await k.load(partial);
    });
  },
});

Deno.test({
  name: "NftPlanner deletes a removed service's chain and elements, and the kernel accepts it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const state = smallCluster();
    const planner = new NftPlanner(config);
    const full = sync(state, planner, true);
    const web = service({
      name: "web",
      clusterIPs: ["10.96.0.10", "fd00:10:96::a"],
      ports: [{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }],
    });
    state.onEvent({ kind: "Service", previous: web });
    const partial = sync(state, planner);
    assert.match(
      partial,
      /^delete chain ip kube-nftproxy lb-tcp-2$/m,
      "no service uses lb-2 any more",
    );
    assert.match(partial, /^delete chain ip6 kube-nftproxy lb-tcp-1$/m);
    assert.match(
      partial,
      /^delete element ip kube-nftproxy cluster-endpoints-tcp \{ .*10\.96\.0\.10 \. tcp \. 80 \. 0/m,
    );
    assert.doesNotMatch(partial, /default\/empty/);
    await withScratch(async (k) => {
      await k.load(full);
      await k.load(partial);
      assert.doesNotMatch(await k.list("ip"), /default\/web/);
    });
  },
});

Deno.test({
  name: "NftPlanner's periodic full sync re-asserts everything and removes stale chains",
  ignore: kernelGate.ignore,
  fn: async () => {
    const state = smallCluster();
    const planner = new NftPlanner(config);
    const first = sync(state, planner, true);
    state.onEvent({
      kind: "Service",
      previous: service({ name: "web", clusterIPs: [] }),
    });
    const full = sync(state, planner, true);
    assert.doesNotMatch(full, /delete table/, "only the first sync recreates the table");
    assert.match(full, /^flush map ip kube-nftproxy cluster-endpoints-tcp$/m);
    assert.doesNotMatch(
      full,
      /^flush map ip kube-nftproxy affinity$/m,
      "affinity survives re-syncs",
    );
    assert.match(full, /^delete chain ip kube-nftproxy lb-tcp-2$/m);
    await withScratch(async (k) => {
      await k.load(first);
      await k.load(full);
      assert.doesNotMatch(await k.list("ip"), /default\/web/);
    });
  },
});

Deno.test({
  name: "NftPlanner never adds one key twice when two services claim the same address and port",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const state = new ProxyState({ hostname: "node-a", log: () => {} });
      for (const name of ["a", "b"]) {
        state.onEvent({ kind: "Service", current: service({ name, clusterIPs: ["10.96.0.50"] }) });
      }
      const planner = new NftPlanner(config);
      const script = sync(state, planner, true);
      assert.equal(script.match(/10\.96\.0\.50 \. tcp \. 80 comment/g)?.length, 1);
      state.onEvent({
        kind: "Service",
        previous: service({ name: "a", clusterIPs: ["10.96.0.50"] }),
      });
      const partial = sync(state, planner);
      assert.match(
        partial,
        /delete element ip kube-nftproxy no-endpoint-services \{ 10\.96\.0\.50 \. tcp \. 80 \}/,
      );
      assert.match(
        partial,
        /add element ip kube-nftproxy no-endpoint-services \{ 10\.96\.0\.50 \. tcp \. 80 comment "default\/b:http"/,
      );
      await k.load(script);
      await k.load(partial);
    }),
});

Deno.test({
  name: "NftPlanner plans from the last committed state when a plan was not applied",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const state = smallCluster();
      const planner = new NftPlanner(config);
      await k.load(sync(state, planner, true));
      state.onEvent({
        kind: "EndpointSlice",
        current: endpointSlice({ name: "empty-1", service: "empty", endpoints: ["10.244.1.13"] }),
      });
      const { changed } = state.takeChanges();
      const failed = planner.plan(state, { full: false, changed }); // never committed
      const retry = planner.plan(state, { full: false, changed });
      assert.equal(retry.script, failed.script);
      await k.load(retry.script);
    }),
});

Deno.test({
  name: "NftPlanner creates a new balancer before an existing external chain jumps to it",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const state = new ProxyState({ hostname: "node-a", log: () => {} });
      const np = service({
        name: "np",
        type: "NodePort",
        clusterIPs: ["10.96.0.60"],
        ports: [{ name: "http", port: 80, nodePort: 30060 }],
      });
      const slice = (ips: string[]) =>
        endpointSlice({ name: "np-1", service: "np", endpoints: ips });
      state.onEvent({ kind: "Node", current: node("node-a", { ips: ["192.168.77.1"] }) });
      state.onEvent({ kind: "Service", current: np });
      state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11"]) });
      const planner = new NftPlanner({ ...config, hostname: "node-a" });
      await k.load(sync(state, planner, true));
      state.onEvent({
        kind: "EndpointSlice",
        previous: slice(["10.244.1.11"]),
        current: slice(["10.244.1.11", "10.244.1.12"]),
      });
      const partial = sync(state, planner);
      assert.ok(
        partial.indexOf("add chain ip kube-nftproxy lb-tcp-2") <
          partial.indexOf("goto lb-tcp-2"),
        partial,
      );
      await k.load(partial);
    }),
});

/**
 * The elements a table holds after `scripts` ran in order (`family set key` → the rest of the
 * element), failing on a key added twice or deleted while absent: nft would reject either.
 */
function elementsAfter(scripts: readonly string[]): Map<string, string> {
  const table = new Map<string, string>();
  for (const line of scripts.join("").split("\n")) {
    const dropped = /^delete table (ip6?) /.exec(line);
    if (dropped) {
      for (const id of [...table.keys()]) if (id.startsWith(`${dropped[1]} `)) table.delete(id);
    }
    const flush = /^flush (?:set|map) (ip6?) \S+ (\S+)$/.exec(line);
    if (flush) {
      for (const id of [...table.keys()]) {
        if (id.startsWith(`${flush[1]} ${flush[2]} `)) table.delete(id);
      }
    }
    const m = /^(add|delete) element (ip6?) \S+ (\S+) \{ (.*) \}$/.exec(line);
    if (!m) continue;
    for (const item of m[4].split(", ")) {
      const cut = item.search(/ comment "| : /);
      const key: string = cut < 0 ? item : item.slice(0, cut);
      const id: string = `${m[2]} ${m[3]} ${key}`;
      if (m[1] === "add") {
        assert.ok(!table.has(id), `${id} added twice`);
        table.set(id, item.slice(key.length));
      } else {
        assert.ok(table.delete(id), `${id} deleted while absent`);
      }
    }
  }
  return table;
}

Deno.test("NftPlanner gives two services claiming one entry point each endpoint index once, and partial syncs end where a full sync does", () => {
  const state = new ProxyState({ hostname: "node-a", log: () => {} });
  const shared = (name: string) => service({ name, clusterIPs: ["10.96.0.70"] });
  const slice = (name: string, ips: string[]) =>
    endpointSlice({ name: `${name}-1`, service: name, endpoints: ips });
  state.onEvent({ kind: "Service", current: shared("a") });
  state.onEvent({ kind: "EndpointSlice", current: slice("a", ["10.244.1.21", "10.244.1.22"]) });
  state.onEvent({ kind: "Service", current: shared("b") });
  state.onEvent({
    kind: "EndpointSlice",
    current: slice("b", ["10.244.1.31", "10.244.1.32", "10.244.1.33"]),
  });
  const planner = new NftPlanner(config);
  const scripts = [sync(state, planner, true)];
  const fresh = () => elementsAfter([sync(state, new NftPlanner(config), true)]);
  const endpoints = (table: Map<string, string>) =>
    [...table].filter(([id]) => id.startsWith("ip cluster-endpoints-tcp 10.96.0.70 "));
  assert.deepEqual(endpoints(elementsAfter(scripts)), [
    [
      "ip cluster-endpoints-tcp 10.96.0.70 . tcp . 80 . 0",
      " : 10.244.1.21 . 8080",
    ],
    [
      "ip cluster-endpoints-tcp 10.96.0.70 . tcp . 80 . 1",
      " : 10.244.1.22 . 8080",
    ],
    [
      "ip cluster-endpoints-tcp 10.96.0.70 . tcp . 80 . 2",
      " : 10.244.1.33 . 8080",
    ],
  ], "a's endpoints first; b's third index fills in, as if each key were owned on its own");

  state.onEvent({ kind: "Service", previous: shared("a") });
  scripts.push(sync(state, planner));
  assert.deepEqual(elementsAfter(scripts), fresh(), "b takes over every index when a goes");

  state.onEvent({ kind: "Service", current: shared("a") });
  state.onEvent({
    kind: "EndpointSlice",
    previous: slice("b", ["10.244.1.31", "10.244.1.32", "10.244.1.33"]),
    current: slice("b", ["10.244.1.31"]),
  });
  scripts.push(sync(state, planner));
  assert.deepEqual(elementsAfter(scripts), fresh(), "b keeps index 0, a's second endpoint stays");
  assert.equal(endpoints(elementsAfter(scripts)).length, 2);
});

Deno.test({
  name:
    "NftPlanner allows a load-balancer IP inside a source range once, when the node is in the range too, and the kernel accepts it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const state = new ProxyState({ hostname: "node-a", log: () => {} });
    state.onEvent({ kind: "Node", current: node("node-a", { ips: ["192.168.0.10"] }) });
    state.onEvent({
      kind: "Service",
      current: service({
        name: "lb",
        type: "LoadBalancer",
        clusterIPs: ["10.96.0.20"],
        ports: [{ name: "http", port: 80, nodePort: 30080 }],
        spec: { loadBalancerSourceRanges: ["0.0.0.0/0"] },
        status: { loadBalancer: { ingress: [{ ip: "10.96.0.30" }] } },
      }),
    });
    const script = sync(state, new NftPlanner(config), true);
    const allowed = script.split("\n").filter((l) =>
      l.startsWith("add element ip kube-nftproxy firewall-allow ")
    );
    // The range holds the LB IP already: a second element for it would overlap (nft: exists).
    assert.deepEqual(allowed, [
      'add element ip kube-nftproxy firewall-allow { 10.96.0.30 . tcp . 80 . 0.0.0.0/0 comment "default/lb:http" }',
    ]);
    await withScratch((k) => k.load(script));
  },
});
