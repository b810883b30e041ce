import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../config/config.ts";
import type { ObjectEvent, RawObject } from "../../source/events.ts";
import { ProxyState } from "../../tracker/proxy_state.ts";
import { endpointSlice, node, service, serviceCIDR } from "../../../tests/fixtures/objects.ts";
import { assertGolden } from "../../../tests/fixtures/golden.ts";
import {
  BACKENDS,
  kernelGate,
  withIptablesScratch,
  withoutComments,
} from "../../../tests/e2e/iptables_harness.ts";
import { IptablesPlanner } from "./planner.ts";
import { splitSections } from "./script.ts";

const config = {
  ...DEFAULT_CONFIG,
  hostname: "node-a",
  clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
};
const GOLDEN = new URL("./testdata/small_cluster.iptables", import.meta.url);

const WEB = service({
  name: "web",
  clusterIPs: ["10.96.0.10", "fd00:10:96::a"],
  ports: [{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }],
});
const WEB_V4 = endpointSlice({
  name: "web-v4",
  service: "web",
  ports: [{ name: "http", port: 8080 }, { name: "dns", port: 5353, protocol: "UDP" }],
  endpoints: ["10.244.1.12", "10.244.1.11"],
});
const NODE_PORT = service({
  name: "np",
  type: "NodePort",
  clusterIPs: ["10.96.0.12"],
  ports: [{ name: "http", port: 80, nodePort: 30080 }],
  spec: {
    externalTrafficPolicy: "Local",
    sessionAffinity: "ClientIP",
    sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
  },
});
const NODE_PORT_EPS = endpointSlice({
  name: "np-v4",
  service: "np",
  endpoints: ["10.244.1.11", { ip: "10.244.2.11", nodeName: "node-b" }],
});
const EMPTY = service({ name: "empty", clusterIPs: ["10.96.0.11"] });

/** A small dual-stack cluster on node-a: web (2 ports, 2 endpoints), a NodePort, an empty one. */
function smallCluster(): ProxyState {
  const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
  const events: ObjectEvent[] = [
    {
      kind: "Node",
      current: node("node-a", { ips: ["192.168.77.1", "fd00:77::1"], podCIDRs: ["10.244.1.0/24"] }),
    },
    {
      kind: "ServiceCIDR",
      current: serviceCIDR("kubernetes", ["10.96.0.0/16", "fd00:10:96::/112"]),
    },
    { kind: "Service", current: WEB },
    { kind: "Service", current: NODE_PORT },
    { kind: "Service", current: EMPTY },
    { kind: "EndpointSlice", current: WEB_V4 },
    { kind: "EndpointSlice", current: NODE_PORT_EPS },
    {
      kind: "EndpointSlice",
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

function sync(state: ProxyState, planner: IptablesPlanner, full = false): string {
  const { changed, global } = state.takeChanges();
  const plan = planner.plan(state, { full: full || global, changed });
  plan.commit();
  return plan.script;
}

function update(
  state: ProxyState,
  kind: "Service" | "EndpointSlice",
  previous?: RawObject,
  current?: RawObject,
): void {
  state.onEvent({ kind, previous, current });
}

Deno.test({
  name:
    "IptablesPlanner renders a small cluster exactly as the golden script, and both back ends load it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const script = sync(smallCluster(), new IptablesPlanner(config), true);
    await assertGolden(script, GOLDEN);
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        await k.apply(script, backend);
        await k.apply(script, backend); // a full sync is re-runnable and adds no second jump
        const saved = await k.saveText("IPv4", backend);
        assert.equal(saved.match(/-A PREROUTING .*-j KUBE-SERVICES/g)?.length, 1, saved);
        assert.match(saved, /-A KUBE-SVC-\S+ .*-m statistic --mode random --probability 0\.5/);
        const saved6 = await k.saveText("IPv6", backend);
        assert.match(saved6, /--to-destination \[fd00:10:244:1::11\]:8080/);
      });
    }
  },
});

Deno.test("IptablesPlanner sends nothing when nothing changed", () => {
  const state = smallCluster();
  const planner = new IptablesPlanner(config);
  sync(state, planner, true);
  assert.equal(sync(state, planner), "");
  update(state, "Service", WEB, structuredClone(WEB)); // a no-op update
  assert.equal(sync(state, planner), "");
});

Deno.test("IptablesPlanner rewrites only the changed service's chains when an endpoint is added", () => {
  const state = smallCluster();
  const planner = new IptablesPlanner(config);
  sync(state, planner, true);
  const grown = endpointSlice({
    name: "web-v4",
    service: "web",
    ports: [{ name: "http", port: 8080 }, { name: "dns", port: 5353, protocol: "UDP" }],
    endpoints: ["10.244.1.12", "10.244.1.11", "10.244.1.13"],
  });
  update(state, "EndpointSlice", WEB_V4, grown);
  const script = sync(state, planner);
  const [v4, ...rest] = splitSections(script);
  assert.equal(rest.length, 0, "IPv6 is unchanged");
  assert.equal(v4.full, false);
  const declared = v4.text.split("\n").filter((l) => l.startsWith(":"));
  // web:http and web:dns: their cluster chains and the new endpoints' chains, nothing else.
  assert.equal(declared.length, 4, v4.text);
  assert.ok(declared.every((l) => /^:KUBE-(SVC|SEP)-/.test(l)), v4.text);
  assert.ok(!v4.text.includes("*filter"), "filter unchanged");
  assert.ok(!v4.text.includes("-A KUBE-SERVICES"), "dispatch unchanged");
});

Deno.test("IptablesPlanner deletes the chains of a removed service and re-asserts dispatch", () => {
  const state = smallCluster();
  const planner = new IptablesPlanner(config);
  sync(state, planner, true);
  update(state, "Service", NODE_PORT, undefined);
  const [v4] = splitSections(sync(state, planner));
  const removed = v4.text.split("\n").filter((l) => l.startsWith("-X "));
  // KUBE-SVC, KUBE-SVL, KUBE-EXT and two KUBE-SEP chains of default/np:http.
  assert.equal(removed.length, 5, v4.text);
  assert.ok(v4.text.includes(":KUBE-SERVICES - [0:0]"));
  assert.ok(v4.text.includes(":KUBE-NODEPORTS - [0:0]"));
  assert.ok(!v4.text.includes("10.96.0.12"), "no rule for the removed cluster IP");
});

Deno.test({
  name:
    "IptablesPlanner's partial syncs leave every chain's rules in the order a fresh full sync writes them (distinct services' dispatch rules in any order)",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        const state = smallCluster();
        const planner = new IptablesPlanner(config);
        await k.apply(sync(state, planner, true), backend);
        const steps: [
          Parameters<typeof update>[1],
          RawObject | undefined,
          RawObject | undefined,
        ][] = [
          [
            "EndpointSlice",
            WEB_V4,
            endpointSlice({ ...sliceSpec(WEB_V4), endpoints: ["10.244.1.13"] }),
          ],
          ["EndpointSlice", NODE_PORT_EPS, undefined],
          ["Service", NODE_PORT, undefined],
          ["Service", undefined, service({ name: "late", clusterIPs: ["10.96.0.30"] })],
          [
            "EndpointSlice",
            undefined,
            endpointSlice({ name: "late-1", service: "late", endpoints: ["10.244.1.14"] }),
          ],
        ];
        for (const [kind, previous, current] of steps) {
          update(state, kind, previous, current);
          const script = sync(state, planner);
          assert.ok(script !== "", `${kind} change planned nothing`);
          assert.ok(splitSections(script).every((s) => !s.full));
          await k.apply(script, backend);
        }
        const fresh = sync(state, new IptablesPlanner(config), true);
        await withIptablesScratch(async (f) => {
          await f.apply(fresh, backend);
          for (const family of ["IPv4", "IPv6"] as const) {
            assert.deepEqual(
              chainsInOrder(await k.saveText(family, backend)),
              chainsInOrder(await f.saveText(family, backend)),
              `${family} with iptables-${backend}`,
            );
          }
        });
      });
    }
  },
});

Deno.test("IptablesPlanner plans a full sync when the options change", () => {
  const state = smallCluster();
  const planner = new IptablesPlanner(config);
  sync(state, planner, true);
  state.onEvent({
    kind: "Node",
    previous: undefined,
    current: node("node-a", { ips: ["192.168.77.5"], podCIDRs: ["10.244.1.0/24"] }),
  });
  const sections = splitSections(sync(state, planner));
  assert.ok(sections.length === 2 && sections.every((s) => s.full));
  assert.match(sections[0].text, /-d 192\.168\.77\.5 -j KUBE-NODEPORTS/);
});

function sliceSpec(
  slice: RawObject,
): {
  name: string;
  service: string;
  ports: { name: string; port: number; protocol: "TCP" | "UDP" }[];
} {
  const raw = slice as {
    metadata: { name: string; labels: Record<string, string> };
    ports: { name: string; port: number; protocol: "TCP" | "UDP" }[];
  };
  return {
    name: raw.metadata.name,
    service: raw.metadata.labels["kubernetes.io/service-name"],
    ports: raw.ports,
  };
}

/**
 * Dispatch chains: one rule per service port (or per service IP), each matching its own
 * destination, then the catch-alls (the jump to KUBE-NODEPORTS, the drop of unallocated service
 * IPs). Only the catch-alls' place matters there: the per-service rules may come in any order.
 */
const DISPATCH = new Set([
  "nat KUBE-SERVICES",
  "nat KUBE-NODEPORTS",
  "filter KUBE-SERVICES",
  "filter KUBE-EXTERNAL-SERVICES",
  "filter KUBE-NODEPORTS",
  "filter KUBE-PROXY-FIREWALL",
  "filter KUBE-CLUSTER-IPS",
]);

/** A rule of a dispatch chain that belongs to one service (its comment names it). */
const PER_SERVICE = /-m comment --comment "[^" ]+\/[^" ]+/;

/**
 * `iptables-save` output as `table chain` → its rules, chains sorted by name. Rules keep their
 * order (the statistic cascade of a KUBE-SVC chain depends on it), except in {@link DISPATCH}
 * chains, where the per-service rules are sorted and must all come before the catch-alls. The
 * order chains are listed in and their counters are no part of what a sync must reproduce.
 */
function chainsInOrder(saved: string): Record<string, string[]> {
  const chains: Record<string, string[]> = {};
  let table = "";
  for (const line of withoutComments(saved).split("\n")) {
    if (line.startsWith("*")) table = line.slice(1);
    else if (line.startsWith(":")) chains[`${table} ${line.slice(1).split(" ")[0]}`] ??= [];
    else if (line.startsWith("-A ")) {
      const chain = line.split(" ")[1];
      (chains[`${table} ${chain}`] ??= []).push(line);
    }
  }
  for (const [chain, rules] of Object.entries(chains)) {
    if (!DISPATCH.has(chain)) continue;
    const perService = rules.filter((r) => PER_SERVICE.test(r));
    const rest = rules.filter((r) => !PER_SERVICE.test(r));
    const firstCatchAll = rules.findIndex((r) => !PER_SERVICE.test(r));
    const misplaced = firstCatchAll >= 0 &&
      perService.some((r) => rules.indexOf(r) > firstCatchAll);
    chains[chain] = [
      ...(misplaced ? ["(a per-service rule after a catch-all)"] : []),
      ...perService.sort(),
      ...rest,
    ];
  }
  return Object.fromEntries(Object.entries(chains).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0));
}
