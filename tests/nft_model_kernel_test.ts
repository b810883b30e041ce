/**
 * Proves {@link NftModel} right against the kernel: the golden script and a run of partial
 * syncs (and a periodic full one) are applied both to a namespace's kernel and to the model;
 * after each, the model's tables are written out ({@link NftModel.dump}) into a second, empty
 * namespace, and the two kernels must then list the same tables (nft's JSON: chains with rules
 * in order, sets and maps with elements and comments). Scripts the kernel refuses, the model
 * refuses, and both keep their tables.
 *
 * @module
 */
import assert from "node:assert/strict";
import { applyNft } from "../src/apply/nft.ts";
import { DEFAULT_CONFIG } from "../src/config/config.ts";
import { NftPlanner } from "../src/render/nft/planner.ts";
import type { ObjectEvent } from "../src/source/events.ts";
import { ProxyState } from "../src/tracker/proxy_state.ts";
import { endpointSlice, service, serviceCIDR } from "./fixtures/objects.ts";
import { kernelGate, type Scratch, withScratch } from "./nft_scratch.ts";
import { NftModel, NftModelError } from "./nft_model.ts";
import { firstDifference, listTables, tableText } from "./property/cluster.ts";

const GOLDEN = new URL("../nft/golden/clusterip.nft", import.meta.url);
const TABLE = "kube-nftproxy";
const config = { ...DEFAULT_CONFIG, clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"] };

const WEB = service({
  name: "web",
  clusterIPs: ["10.96.0.10", "fd00:10:96::a"],
  ports: [
    { name: "http", port: 80 },
    { name: "dns", port: 53, protocol: "UDP" },
    { name: "assoc", port: 80, protocol: "SCTP" },
  ],
});
const WEB_V4 = (endpoints: string[]) =>
  endpointSlice({
    name: "web-v4",
    service: "web",
    ports: [
      { name: "http", port: 8080 },
      { name: "dns", port: 5353, protocol: "UDP" },
      { name: "assoc", port: 8080, protocol: "SCTP" },
    ],
    endpoints,
  });

/** The cluster of nft/golden/clusterip.nft (as src/render/nft/syncer_test.ts builds it). */
const GOLDEN_CLUSTER: ObjectEvent[] = [
  { kind: "ServiceCIDR", current: serviceCIDR("kubernetes", ["10.96.0.0/16"]) },
  { kind: "Service", current: WEB },
  { kind: "Service", current: service({ name: "empty", clusterIPs: ["10.96.0.11"] }) },
  { kind: "EndpointSlice", current: WEB_V4(["10.244.1.12", "10.244.1.11"]) },
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

/** A LoadBalancer with everything: eTP Local, source ranges, ClientIP affinity, both families. */
const LB = service({
  name: "lb",
  type: "LoadBalancer",
  clusterIPs: ["10.96.0.20", "fd00:10:96::20"],
  ports: [{ name: "http", port: 80, nodePort: 30080 }],
  spec: {
    externalTrafficPolicy: "Local",
    sessionAffinity: "ClientIP",
    externalIPs: ["192.0.2.7"],
    loadBalancerSourceRanges: ["198.51.100.0/24", "2001:db8::/64"],
  },
  status: { loadBalancer: { ingress: [{ ip: "203.0.113.9" }, { ip: "2001:db8:1::9" }] } },
});
const LB_SLICES = [
  endpointSlice({
    name: "lb-v4",
    service: "lb",
    endpoints: ["10.244.1.20", { ip: "10.244.2.20", nodeName: "node-b" }],
  }),
  endpointSlice({
    name: "lb-v6",
    service: "lb",
    addressType: "IPv6",
    endpoints: ["fd00:10:244:1::20", "fd00:10:244:1::21"],
  }),
];

/** The syncs after the golden one: what changes, and whether the sync is a full one. */
const STEPS: { what: string; events: ObjectEvent[]; full?: boolean }[] = [
  {
    what: "the empty service gets an endpoint",
    events: [{
      kind: "EndpointSlice",
      current: endpointSlice({ name: "empty-1", service: "empty", endpoints: ["10.244.1.13"] }),
    }],
  },
  {
    what: "web loses an endpoint",
    events: [{ kind: "EndpointSlice", current: WEB_V4(["10.244.1.11"]) }],
  },
  {
    what: "a LoadBalancer with affinity, ranges and eTP Local arrives",
    events: [
      { kind: "Service", current: LB },
      ...LB_SLICES.map((current): ObjectEvent => ({ kind: "EndpointSlice", current })),
    ],
  },
  {
    what: "a periodic full sync, with the empty service's endpoint gone again",
    events: [{
      kind: "EndpointSlice",
      current: endpointSlice({ name: "empty-1", service: "empty", endpoints: [] }),
    }],
    full: true,
  },
  {
    what: "an IPv6 endpoint of the LoadBalancer goes (its affinity set with it)",
    events: [{
      kind: "EndpointSlice",
      current: endpointSlice({
        name: "lb-v6",
        service: "lb",
        addressType: "IPv6",
        endpoints: ["fd00:10:244:1::20"],
      }),
    }],
  },
  { what: "web goes", events: [{ kind: "Service", previous: WEB }] },
  { what: "the LoadBalancer goes", events: [{ kind: "Service", previous: LB }] },
];

/** Kernel-side differences that change nothing (see listTables). */
const QUIRKS = { ignoreProtocolDependency: true };

/** Loads the model's tables into the empty namespace `b`; throws if A's and B's tables differ. */
async function assertSameTables(model: NftModel, a: Scratch, b: Scratch, what: string) {
  await applyNft("flush ruleset\n", { netns: b.ns });
  await b.load(model.dump());
  const [kernel, modelled] = [await listTables(a.ns, QUIRKS), await listTables(b.ns, QUIRKS)];
  assert.deepEqual([...modelled.keys()].sort(), [...kernel.keys()].sort(), what);
  for (const id of kernel.keys()) {
    const [x, y] = [tableText(kernel.get(id)), tableText(modelled.get(id))];
    assert.ok(
      x === y,
      `${what}, ${id}: the model differs from the kernel\n${firstDifference(y, x)}`,
    );
  }
}

Deno.test({
  name: "NftModel holds what the kernel holds after the golden script and a run of partial syncs",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch((a) =>
      withScratch(async (b) => {
        const state = new ProxyState({ hostname: "node-a", log: () => {} });
        GOLDEN_CLUSTER.forEach((e) => state.onEvent(e));
        const planner = new NftPlanner(config);
        const model = new NftModel();
        const sync = async (what: string, full: boolean) => {
          const { changed, global } = state.takeChanges();
          const plan = planner.plan(state, { full: full || global, changed });
          const script = plan.script;
          if (what === "the golden script") {
            assert.equal(script, await Deno.readTextFile(GOLDEN), "not the golden cluster");
          }
          assert.notEqual(script, "", `${what}: nothing to sync`);
          await a.load(script);
          model.apply(script);
          plan.commit();
          await assertSameTables(model, a, b, what);
        };
        await sync("the golden script", true);
        for (const step of STEPS) {
          step.events.forEach((e) => state.onEvent(e));
          await sync(step.what, step.full ?? false);
        }
      })
    ),
});

/** Scripts both must refuse on top of the golden table (each also adds a chain first). */
const REFUSED: string[] = [
  "delete element ip kube-nftproxy cluster-ips { 10.96.0.99 }",
  'add element ip kube-nftproxy service-ips { 10.96.0.10 . tcp . 80 comment "x" : drop }',
  "add element ip kube-nftproxy service-ips { 10.96.0.12 . tcp . 80 : goto nowhere }",
  "add element ip kube-nftproxy nowhere { 10.96.0.12 }",
  "delete chain ip kube-nftproxy lb-tcp-2",
  "flush chain ip kube-nftproxy lb-tcp-2\ndelete chain ip kube-nftproxy lb-tcp-2",
  "flush chain ip kube-nftproxy reject-chain\ndelete chain ip kube-nftproxy reject-chain",
  "delete map ip kube-nftproxy cluster-endpoints-udp",
  "add rule ip kube-nftproxy services jump nowhere",
  "add rule ip kube-nftproxy services ip daddr @nothing drop",
  "add rule ip kube-nftproxy nowhere accept",
  "flush chain ip kube-nftproxy nowhere",
  "add set ip kube-nftproxy cluster-ips { type ipv6_addr; }",
  "delete table ip other",
];

/** Scripts both accept on top of the golden table, changing nothing. */
const NO_OPS: string[] = [
  'add table ip kube-nftproxy { comment "rules for kube-nftproxy"; }',
  "add chain ip kube-nftproxy lb-tcp-2",
  'add element ip kube-nftproxy service-ips { 10.96.0.10 . tcp . 80 comment "another comment" : goto lb-tcp-2 }',
  "add element ip kube-nftproxy hairpin-endpoints { 10.244.1.11 . 10.244.1.11 }",
];

Deno.test({
  name: "NftModel refuses the scripts the kernel refuses, and accepts its no-ops, both unchanged",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch((a) =>
      withScratch(async (b) => {
        const golden = await Deno.readTextFile(GOLDEN);
        await a.load(golden);
        const model = new NftModel();
        model.apply(golden);
        for (const refused of REFUSED) {
          const script = `add chain ip ${TABLE} fresh\n${refused}\n`;
          await assert.rejects(a.load(script), Error, `the kernel took:\n${refused}`);
          assert.throws(() => model.apply(script), NftModelError, `the model took:\n${refused}`);
        }
        await assertSameTables(model, a, b, "after the refused scripts");
        for (const script of NO_OPS) {
          await a.load(`${script}\n`);
          model.apply(`${script}\n`);
        }
        await assertSameTables(model, a, b, "after the no-ops");
        assert.match(
          model.table("ip", TABLE).elements("service-ips")[0].comment ?? "",
          /^default\/web:http$/,
        );
      })
    ),
});
