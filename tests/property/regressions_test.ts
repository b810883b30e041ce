/**
 * Regression tests for the bugs the property tests found in `src/`, every one of them fixed
 * since: each test states the behaviour a user gets, with the smallest input that once broke
 * it, and the comment above it is the bug report as it was filed (the code it describes, and
 * the fix it suggests, are history: the fix has landed). A new bug found by a property is
 * pinned here as a failing test with `ignore: true` until its fix lands, together with an
 * entry in `KNOWN_BUGS` (cluster.ts) so that the properties count its symptoms instead of
 * failing; both go with the fix. Tests that load scripts take `ignore: kernelGate.ignore` from
 * ../nft_scratch.ts; the others run everywhere.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../src/config/config.ts";
import { validateConfig } from "../../src/config/validation.ts";
import { endpointSlice, service } from "../fixtures/objects.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import type { ClusterObject, ConfigVariant } from "./arbitraries.ts";
import { listTables, scriptElements, SimulatedProxy, tableText } from "./cluster.ts";

const PLAIN: ConfigVariant = {
  masqueradeAll: false,
  masqueradeBit: 14,
  clusterCIDRs: ["10.244.0.0/16"],
  detectLocalMode: "ClusterCIDR",
  bridgeInterface: "cbr0",
  interfaceNamePrefix: "veth",
};

function render(objects: readonly ClusterObject[], variant: ConfigVariant = PLAIN): string {
  const proxy = new SimulatedProxy(variant, "t");
  objects.forEach(({ kind, object }) => proxy.onEvent({ kind, current: object }));
  return proxy.sync();
}

/** A UDP-only DNS service with one endpoint. */
const DNS: ClusterObject[] = [
  {
    kind: "Service",
    object: service({
      namespace: "kube-system",
      name: "kube-dns",
      clusterIPs: ["10.96.0.10"],
      ports: [{ name: "dns", port: 53, protocol: "UDP" }],
    }),
  },
  {
    kind: "EndpointSlice",
    object: endpointSlice({
      namespace: "kube-system",
      name: "kube-dns-1",
      service: "kube-dns",
      ports: [{ name: "dns", port: 53, protocol: "UDP" }],
      endpoints: ["10.244.1.5"],
    }),
  },
];

// Found by partial_sync_property_test.ts. The `cluster-ips` element of a multi-port Service is
// claimed by each of its ports with that port's comment; src/render/nft/syncer.ts keeps the
// first claimant's version ("first owner wins"), so after a port is removed and re-added the
// comment names another port than a fresh full sync would. The same rule decides which of two
// Services claiming one address and port gets the traffic (next test).
Deno.test({
  name: "NftPlanner's table after partial syncs equals a fresh full sync when a port comes back",
  ignore: kernelGate.ignore,
  fn: async () => {
    const web = (ports: { name: string; port: number; protocol?: "TCP" | "UDP" }[]) =>
      service({ name: "web", clusterIPs: ["10.96.0.20"], ports });
    const both = web([{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }]);
    const proxy = new SimulatedProxy(PLAIN, "t");
    const scripts: string[] = [];
    for (const object of [both, web([{ name: "dns", port: 53, protocol: "UDP" }]), both]) {
      proxy.onEvent({ kind: "Service", current: object });
      scripts.push(proxy.sync());
    }
    const fresh = render([{ kind: "Service", object: both }]);
    await withScratch((a) =>
      withScratch(async (b) => {
        for (const script of scripts) await a.load(script);
        await b.load(fresh);
        assert.equal(
          tableText((await listTables(a.ns)).get("ip t")),
          tableText((await listTables(b.ns)).get("ip t")),
        );
      })
    );
  },
});

// Found by partial_sync_property_test.ts. Two Services claiming the same address and port
// (here a duplicated cluster IP, as a file source or a racing API allows): src/render/nft/
// syncer.ts gives the traffic to whichever port was applied first, so the winner depends on
// the order objects were listed and changed — after a restart the other Service may win.
// A deterministic tie-break (e.g. the lowest service port key) would make a table a function
// of the state alone, and partial syncs converge to what a full sync renders.
Deno.test({
  name: "NftPlanner renders the same table for the same objects listed in any order",
  fn: () => {
    const claimant = (name: string, endpoint: string): ClusterObject[] => [
      { kind: "Service", object: service({ name, clusterIPs: ["10.96.0.30"] }) },
      {
        kind: "EndpointSlice",
        object: endpointSlice({ name: `${name}-1`, service: name, endpoints: [endpoint] }),
      },
    ];
    const a = claimant("a", "10.244.1.1");
    const b = claimant("b", "10.244.2.2");
    const elements = (script: string) =>
      scriptElements(script).map((e) => `${e.family} ${e.set} ${e.key}${e.rest}`).sort();
    assert.deepEqual(elements(render([...b, ...a])), elements(render([...a, ...b])));
  },
});

// Found by kernel_accepts_property_test.ts ("comment too long, 128 characters maximum
// allowed"). src/render/nft/service_fragment.ts #stickyIPv6 comments each per-endpoint affinity set
// with `${this.#comment} clients sticking to ${safeComment(id)}`: the service comment alone may
// be 120 characters (safeComment's cap), so with a long name the whole comment passes nft's 128
// and the transaction is refused — for every service in it. Cap the whole comment instead.
Deno.test({
  name: "NftPlanner keeps every comment within nft's 128 characters",
  ignore: kernelGate.ignore,
  fn: async () => {
    const long = "p".repeat(63);
    const script = render([
      {
        kind: "Service",
        object: service({
          namespace: "n".repeat(63),
          name: "s".repeat(63),
          clusterIPs: ["fd00:96::50"],
          ports: [{ name: long, port: 80 }],
          spec: { sessionAffinity: "ClientIP" },
        }),
      },
      {
        kind: "EndpointSlice",
        object: endpointSlice({
          namespace: "n".repeat(63),
          name: "s-1",
          service: "s".repeat(63),
          addressType: "IPv6",
          ports: [{ name: long, port: 8080 }],
          endpoints: ["fd00:244::50"],
        }),
      },
    ]);
    for (const [, comment] of script.matchAll(/comment "([^"]*)"/g)) {
      assert.ok(comment.length <= 128, `comment of ${comment.length} characters: ${comment}`);
    }
    await withScratch((k) => k.load(script));
  },
});

// Found by partial_sync_property_test.ts ("goto lb-tcp-1 … No such file or directory").
// src/render/nft/syncer.ts (partial plan) writes a changed service's chains in the order they
// come, not so that a chain exists before a rule jumps to it: when a service with an external
// IP, a load-balancer IP or a node port goes from 2 endpoints to 1 (and no other service uses
// `lb-tcp-1` yet), its `external-…` chain's `goto lb-tcp-1` comes before `add chain lb-tcp-1`
// and the partial sync is refused (the runner then recovers with a full sync, after an error
// and a retry). IPv6 sticky chains jumping to new `endpoint-…` chains have the same problem.
// Add every new chain (shared or not) before any rule that references it.
Deno.test({
  name: "NftPlanner's partial sync adds a chain before rules jump to it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const proxy = new SimulatedProxy(PLAIN, "t");
    const slice = (endpoints: string[]) =>
      endpointSlice({ name: "web-1", service: "web", endpoints });
    proxy.onEvent({
      kind: "Service",
      current: service({
        name: "web",
        clusterIPs: ["10.96.0.40"],
        spec: { externalIPs: ["192.168.1.100"] },
      }),
    });
    proxy.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.1", "10.244.1.2"]) });
    const first = proxy.sync();
    proxy.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.1"]) });
    const second = proxy.sync();
    await withScratch(async (k) => {
      await k.load(first);
      await k.load(second);
    });
  },
});

// Found by partial_sync_property_test.ts ("update @affinity-… No such file or directory", and
// a table after partial syncs still holding `set affinity-…` that a fresh sync does not
// create). For IPv6 Services with ClientIP affinity, src/render/nft/service_fragment.ts gives each
// endpoint a dynamic set; src/render/nft/syncer.ts's partial plan never adds or deletes those
// sets: a new endpoint's chains refer to a set that does not exist (the sync is refused), and a
// removed endpoint's set (with the clients it remembers) stays for as long as the proxy runs.
Deno.test({
  name: "NftPlanner's partial sync adds and deletes the affinity sets of IPv6 endpoints",
  ignore: kernelGate.ignore,
  fn: async () => {
    const slice = (endpoints: string[]) =>
      endpointSlice({ name: "web-1", service: "web", addressType: "IPv6", endpoints });
    const proxy = new SimulatedProxy(PLAIN, "t");
    proxy.onEvent({
      kind: "Service",
      current: service({
        name: "web",
        clusterIPs: ["fd00:96::60"],
        spec: { sessionAffinity: "ClientIP" },
      }),
    });
    const scripts: string[] = [];
    for (const endpoints of [["fd00:244::60"], ["fd00:244::60", "fd00:244::61"], []]) {
      proxy.onEvent({ kind: "EndpointSlice", current: slice(endpoints) });
      scripts.push(proxy.sync());
    }
    await withScratch(async (k) => {
      for (const script of scripts) await k.load(script);
      assert.doesNotMatch(await k.list("ip6", "t"), /set affinity-/);
    });
  },
});

// Found by partial_sync_property_test.ts ("add element … firewall-allow { … 10.96.0.0/16 …,
// … 10.96.0.0/12 … }: File exists"). src/render/nft/service_fragment.ts adds one `firewall-allow`
// interval element per loadBalancerSourceRanges entry; nft refuses overlapping intervals in
// one set, so a LoadBalancer Service with ranges like 10.0.0.0/8 and 10.1.0.0/16 (valid for
// the API server) makes every sync's transaction fail — no Service anywhere is updated again
// until that Service changes. Drop ranges contained in another range of the same entry point
// before adding them (and keep in mind two Services sharing an LB IP and port).
Deno.test({
  name: "NftPlanner renders overlapping loadBalancerSourceRanges the kernel accepts",
  ignore: kernelGate.ignore,
  fn: async () => {
    const script = render([
      {
        kind: "Service",
        object: service({
          name: "lb",
          type: "LoadBalancer",
          clusterIPs: ["10.96.0.80"],
          ports: [{ name: "http", port: 80, nodePort: 30080 }],
          spec: { loadBalancerSourceRanges: ["10.0.0.0/8", "10.1.0.0/16"] },
          status: { loadBalancer: { ingress: [{ ip: "192.0.2.10" }] } },
        }),
      },
      {
        kind: "EndpointSlice",
        object: endpointSlice({ name: "lb-1", service: "lb", endpoints: ["10.244.1.1"] }),
      },
    ]);
    await withScratch((k) => k.load(script));
  },
});

// Found while choosing configurations for the properties. src/config/validation.ts accepts
// IPv4 octets with leading zeros in clusterCIDR (Go's sloppy parser reads them as decimal),
// but src/render/nft/options.ts writes the CIDR verbatim and nft reads `010.244.0.0/16` as
// octal: the rule becomes `ip saddr != 8.244.0.0/16`, so pod traffic is masqueraded as if it
// came from outside. Either canonicalise the CIDR where the config is read or refuse it.
Deno.test({
  name:
    "NftPlanner detects local traffic from the cluster CIDR as written, even with leading zeros",
  fn: () => {
    const script = render(DNS, { ...PLAIN, clusterCIDRs: ["010.244.0.0/16"] });
    assert.match(script, /ip saddr != 10\.244\.0\.0\/16 /);
    assert.doesNotMatch(script, /010\.244/);
  },
});

// Found by the hygiene check's design: src/config/validation.ts checks only that
// bridgeInterface / interfaceNamePrefix are non-empty, and src/render/nft/options.ts puts them
// between double quotes in rules. A value holding `"` or `;` breaks every script (or appends
// commands of its own to the transaction). Linux interface names are at most 15 characters
// without `/`, whitespace or quotes; upstream validates the same.
Deno.test({
  name: "validateConfig() refuses a bridge interface name that is not an interface name",
  fn: () => {
    assert.throws(() =>
      validateConfig({
        ...DEFAULT_CONFIG,
        hostname: "node-a",
        detectLocalMode: "BridgeInterface",
        bridgeInterface: 'cbr0"; flush ruleset; "',
      })
    );
  },
});

// Found by reading the keys the trackers use. src/model/service_port.ts servicePortKey() and
// src/tracker/service_tracker.ts join namespace and name with "/", which names may contain
// when they come from a file (the API server refuses them, the model does not): Service `c` in
// namespace `a/b` and Service `b/c` in namespace `a` share one key, so one silently replaces
// the other and deleting either removes both.
Deno.test({
  name: "ProxyState keeps two Services apart even when their names contain slashes",
  fn: () => {
    const script = render([
      {
        kind: "Service",
        object: service({ namespace: "a/b", name: "c", clusterIPs: ["10.96.0.1"] }),
      },
      {
        kind: "Service",
        object: service({ namespace: "a", name: "b/c", clusterIPs: ["10.96.0.2"] }),
      },
    ]);
    const clusterIPs = scriptElements(script).filter((e) => e.set === "cluster-ips").map((e) =>
      e.key
    );
    assert.deepEqual(clusterIPs.sort(), ["10.96.0.1", "10.96.0.2"]);
  },
});
