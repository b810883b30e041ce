/**
 * Specs of {@link NftPlanner}, the planner contract (src/render/planner.ts) for nft: what a
 * full, a partial and an empty sync send, what is remembered only on commit, and that partial
 * syncs always end in the tables a fresh full sync builds. Scripts are applied to
 * {@link NftModel}, which refuses what the kernel would refuse (a chain deleted while in use, an
 * element added twice with another value, a rule naming a chain not yet there), so every spec
 * also checks the script's order; no kernel needed.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  endpointSlice,
  type EndpointSpec,
  node,
  service,
} from "../../../tests/fixtures/objects.ts";
import { ModelProxy } from "../../../tests/fixtures/model_proxy.ts";
import { NftModelError } from "../../../tests/nft_model.ts";
import { configFor } from "../../../tests/property/arbitraries.ts";
import {
  propertySeed,
  reportChecked,
  sequence,
  SimulatedSource,
} from "../../../tests/property/cluster.ts";

const web = (clusterIP = "10.96.0.10", name = "web") => service({ name, clusterIPs: [clusterIP] });
const slice = (endpoints: (string | EndpointSpec)[], service = "web") =>
  endpointSlice({ name: `${service}-1`, service, endpoints });

const TABLE = "kube-nftproxy";

/** Script lines, for order checks. */
const lines = (script: string) => script.trimEnd().split("\n");

/** The canonical tables a fresh proxy's first sync builds from the same objects. */
function freshTables(objects: Parameters<ModelProxy["put"]>): string {
  const fresh = new ModelProxy().put(...objects);
  fresh.sync();
  return fresh.model.canonical();
}

Deno.test("NftPlanner's first sync recreates each table inside the transaction; later full syncs do not", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  const first = proxy.sync();
  assert.equal(first.full, true);
  for (const family of ["ip", "ip6"]) {
    const at = lines(first.script).indexOf(`delete table ${family} kube-nftproxy`);
    assert.equal(
      lines(first.script)[at - 1],
      `add table ${family} kube-nftproxy { comment "rules for kube-nftproxy"; }`,
    );
    assert.equal(lines(first.script)[at + 1], lines(first.script)[at - 1]);
  }
  const again = proxy.sync({ full: true });
  assert.doesNotMatch(again.script, /delete table/);
  assert.match(again.script, /^flush map ip kube-nftproxy service-ips$/m);
});

Deno.test("NftPlanner sends nothing when nothing changed, or when a change was undone before the sync", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  proxy.sync();
  assert.equal(proxy.sync().script, "");
  proxy.put(slice(["10.244.1.12"])).put(slice(["10.244.1.11"]));
  assert.equal(proxy.sync().script, "");
});

Deno.test("NftPlanner's partial sync sends only the changed service port's elements", () => {
  const proxy = new ModelProxy().put(web(), web("10.96.0.20", "db"), slice(["10.244.1.11"]));
  proxy.put(slice(["10.244.1.21"], "db"));
  proxy.sync();
  proxy.put(slice(["10.244.1.12"]));
  const { script, full } = proxy.sync();
  assert.equal(full, false);
  // (Element comments aside: what they say is the ruleset's business, not the planner's.)
  assert.deepEqual(lines(script.replace(/ comment "[^"]*"/g, "")), [
    "delete element ip kube-nftproxy cluster-endpoints-tcp { 10.96.0.10 . tcp . 80 . 0 }",
    "delete element ip kube-nftproxy hairpin-endpoints { 10.244.1.11 . 10.244.1.11 }",
    "add element ip kube-nftproxy cluster-endpoints-tcp { 10.96.0.10 . tcp . 80 . 0 : 10.244.1.12 . 8080 }",
    "add element ip kube-nftproxy hairpin-endpoints { 10.244.1.12 . 10.244.1.12 }",
  ]);
  assert.equal(
    proxy.model.canonical(),
    freshTables([
      web(),
      web("10.96.0.20", "db"),
      slice(["10.244.1.12"]),
      slice(["10.244.1.21"], "db"),
    ]),
  );
});

Deno.test("NftPlanner keeps a shared balancer chain while a service uses it and deletes it, last, with its last user", () => {
  const proxy = new ModelProxy().put(
    web(),
    web("10.96.0.20", "db"),
    slice(["10.244.1.11", "10.244.1.12"]),
    slice(["10.244.1.21", "10.244.1.22"], "db"),
  );
  proxy.sync();
  proxy.put(slice(["10.244.1.11"]));
  const first = proxy.sync().script;
  assert.match(first, /^add chain ip kube-nftproxy lb-tcp-1$/m);
  assert.doesNotMatch(first, /lb-tcp-2$/m, "db still uses lb-tcp-2");
  assert.ok(proxy.ip.chain("lb-tcp-2"));
  proxy.put(slice(["10.244.1.21"], "db"));
  const second = lines(proxy.sync().script);
  // Flushed and deleted after the element that jumped to it was replaced.
  assert.deepEqual(second.slice(-2), [
    "flush chain ip kube-nftproxy lb-tcp-2",
    "delete chain ip kube-nftproxy lb-tcp-2",
  ]);
  assert.equal(proxy.ip.chain("lb-tcp-2"), undefined);
});

Deno.test("NftPlanner creates a new chain before the element or rule that jumps to it", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  proxy.sync();
  proxy.put(slice(["10.244.1.11", "10.244.1.12", "10.244.1.13"]));
  const partial = lines(proxy.sync().script);
  const created = partial.indexOf("add chain ip kube-nftproxy lb-tcp-3");
  const used = partial.findIndex((l) => l.includes("goto lb-tcp-3"));
  assert.ok(created >= 0 && created < used, partial.join("\n"));
});

Deno.test("NftPlanner's full sync re-asserts everything, drops what is gone and keeps the packet path's affinity entries", () => {
  const proxy = new ModelProxy().put(web(), web("10.96.0.20", "db"), slice(["10.244.1.11"]));
  proxy.sync();
  proxy.model.apply(
    "add element ip kube-nftproxy affinity { 10.0.0.5 . 10.96.0.10 . tcp . 80 : 10.244.1.11 . 8080 }\n",
  );
  proxy.remove(web());
  const { script, full } = proxy.sync({ full: true });
  assert.equal(full, true);
  assert.match(script, /^flush map ip kube-nftproxy cluster-endpoints-tcp$/m);
  assert.match(script, /^delete chain ip kube-nftproxy lb-tcp-1$/m);
  assert.doesNotMatch(script, /^flush map ip kube-nftproxy affinity$/m);
  assert.deepEqual(proxy.ip.keys("affinity"), ["10.0.0.5 . 10.96.0.10 . tcp . 80"]);
  assert.deepEqual(proxy.ip.keys("cluster-ips"), ["10.96.0.20"]);
});

Deno.test("NftPlanner remembers a plan only once committed: an uncommitted one is planned again", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  proxy.sync();
  proxy.put(slice(["10.244.1.12"]));
  const { changed } = proxy.state.takeChanges();
  const refused = proxy.planner.plan(proxy.state, { full: false, changed });
  // Not applied, not committed (the kernel refused it): the same change is still to be sent.
  const again = proxy.planner.plan(proxy.state, { full: false, changed });
  assert.equal(again.script, refused.script);
  proxy.model.apply(again.script);
  again.commit();
  assert.equal(
    proxy.planner.plan(proxy.state, { full: false, changed }).script,
    "",
    "committed: nothing left",
  );
});

Deno.test("NftPlanner plans a full sync when the node's addresses change the rendering options", () => {
  const nodePort = service({
    name: "web",
    type: "NodePort",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
  });
  const proxy = new ModelProxy().put(nodePort, slice(["10.244.1.11"]));
  proxy.sync();
  proxy.put(node("node-a", { ips: ["192.168.77.5"] }));
  const { full } = proxy.sync();
  assert.equal(full, true);
  assert.deepEqual(proxy.ip.keys("nodeport-ips"), ["192.168.77.5"]);
  assert.deepEqual(proxy.ip6.keys("nodeport-ips"), [], "the node lost its IPv6 address");
});

Deno.test("NftPlanner gives an address and port claimed twice to the first claimant, then to the other when it goes", () => {
  const a = web("10.96.0.50", "a");
  const b = web("10.96.0.50", "b");
  const proxy = new ModelProxy().put(a, b, slice(["10.244.1.1"], "a"), slice(["10.244.2.2"], "b"));
  const { script } = proxy.sync();
  assert.equal(script.match(/10\.96\.0\.50 \. tcp \. 80 \. 0[ :]/g)?.length, 1, "one key once");
  assert.deepEqual(proxy.ip.elements("cluster-endpoints-tcp").map((e) => e.value), [
    "10.244.1.1 . 8080",
  ]);
  proxy.remove(a);
  proxy.sync();
  assert.deepEqual(proxy.ip.elements("cluster-endpoints-tcp").map((e) => e.value), [
    "10.244.2.2 . 8080",
  ]);
});

Deno.test("NftPlanner.reset() makes the next sync recreate the tables", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  proxy.sync();
  proxy.planner.reset();
  const { script } = proxy.sync();
  assert.match(script, /^delete table ip kube-nftproxy$/m);
  assert.equal(proxy.model.canonical(), freshTables([web(), slice(["10.244.1.11"])]));
});

// The partial-sync property of tests/property, on the model: many more sequences in a second
// (the kernel version stays the proof that the model and the kernel agree on them).
Deno.test("NftPlanner's partial syncs after any event sequence are accepted in order and end in the tables a fresh full sync builds", () => {
  let generated = 0;
  let steps = 0;
  let nonEmpty = 0;
  fc.assert(
    fc.property(sequence, (seq) => {
      generated += seq.steps.length;
      const source = new SimulatedSource(seq.initial);
      const proxy = new ModelProxy(configFor(seq.config, TABLE), { bare: true });
      source.listEvents().forEach((e) => proxy.state.onEvent(e));
      proxy.sync();
      for (const step of seq.steps) {
        for (const change of step) source.apply(change).forEach((e) => proxy.state.onEvent(e));
        try {
          if (proxy.sync().script !== "") nonEmpty++;
        } catch (err) {
          if (err instanceof NftModelError) throw new Error(`step ${steps}: ${err.message}`);
          throw err;
        }
        steps++;
      }
      const fresh = new ModelProxy(configFor(seq.config, TABLE), { bare: true });
      source.listEvents().forEach((e) => fresh.state.onEvent(e));
      fresh.sync();
      assert.equal(proxy.model.canonical(), fresh.model.canonical());
    }),
    { seed: propertySeed(), numRuns: 300 },
  );
  // Every step that was applied is checked by the final comparison of its sequence.
  reportChecked(
    "partial-sync property (model)",
    { checked: steps, generated },
    `${nonEmpty} non-empty scripts`,
  );
});

Deno.test("NftPlanner.affinityTargets() names each ClientIP port's endpoints, after a full sync and after partial ones", () => {
  const sticky = (clusterIP: string, name: string) =>
    service({ name, clusterIPs: [clusterIP], spec: { sessionAffinity: "ClientIP" } });
  const proxy = new ModelProxy().put(
    sticky("10.96.0.10", "web"),
    slice(["10.244.1.11", "10.244.1.12"]),
    web("10.96.0.20", "db"),
    slice(["10.244.1.13"], "db"),
  );
  proxy.sync();
  const targets = () =>
    [...proxy.planner.affinityTargets()].map(([id, endpoints]) => [id, [...endpoints].sort()]);
  // One id, the sticky port's; the plain `db` has none.
  const [[id]] = targets();
  assert.deepEqual(targets(), [[id, ["10.244.1.11 . 8080", "10.244.1.12 . 8080"]]]);
  proxy.put(slice(["10.244.1.12", "10.244.1.14"]));
  assert.equal(proxy.sync().full, false);
  assert.deepEqual(targets(), [[id, ["10.244.1.12 . 8080", "10.244.1.14 . 8080"]]]);
  proxy.remove(sticky("10.96.0.10", "web"));
  proxy.sync();
  assert.deepEqual(targets(), []);
});

Deno.test("NftPlanner.affinityTargets() is empty without a ClientIP port", () => {
  const proxy = new ModelProxy().put(web(), slice(["10.244.1.11"]));
  proxy.sync();
  assert.deepEqual(proxy.planner.affinityTargets(), new Map());
});

Deno.test("NftPlanner's partial sync recreates an IPv6 ClientIP set whose timeout changed, as a full sync would build it", () => {
  const sticky = (timeoutSeconds: number) =>
    service({
      name: "web",
      clusterIPs: ["fd00:96::10"],
      spec: {
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds } },
      },
    });
  const v6 = endpointSlice({
    name: "web-1",
    service: "web",
    addressType: "IPv6",
    endpoints: ["fd00:244::11"],
  });
  const proxy = new ModelProxy().put(sticky(10800), v6);
  proxy.sync();
  proxy.put(sticky(60));
  const { script, full } = proxy.sync();
  assert.equal(full, false);
  assert.match(script, /^delete set ip6 kube-nftproxy affinity-/m);
  assert.equal(proxy.model.canonical(), freshTables([sticky(60), v6]));
});
