/**
 * Specs of {@link IptablesSyncer}: what one family's full and partial restore sections declare
 * (a declared chain is created or flushed), fill and delete. Pure; the kernel's side of it is in
 * planner_test.ts.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../config/config.ts";
import { ProxyState } from "../../tracker/proxy_state.ts";
import {
  endpointSlice,
  type EndpointSpec,
  node,
  service,
} from "../../../tests/fixtures/objects.ts";
import { iptablesRenderOptions } from "./options.ts";
import { IptablesSyncer } from "./syncer.ts";
import { serviceChainNames } from "./names.ts";
import type { ServicePortName } from "../../model/service_port.ts";

const config = { ...DEFAULT_CONFIG, hostname: "node-a", clusterCIDRs: ["10.244.0.0/16"] };

const web = (name = "web", ip = "10.96.0.10") => service({ name, clusterIPs: [ip] });
const slice = (endpoints: (string | EndpointSpec)[], svc = "web") =>
  endpointSlice({ name: `${svc}-1`, service: svc, endpoints });
const spn = (name: string): ServicePortName => ({
  namespace: "default",
  name,
  port: "http",
  protocol: "TCP",
});
const WEB = serviceChainNames(spn("web"));
const DB = serviceChainNames(spn("db"));

/** A state, and a syncer planning its IPv4 sections (each plan committed, as if restored). */
function setup() {
  const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
  state.onEvent({ kind: "Node", current: node("node-a", { ips: ["192.168.77.1"] }) });
  const syncer = new IptablesSyncer();
  const sync = (full = false) => {
    const { changed, global } = state.takeChanges();
    const plan = syncer.plan(
      state,
      { full: full || global, changed },
      iptablesRenderOptions(config, state, "IPv4"),
    );
    plan.commit();
    return plan;
  };
  return { state, syncer, sync };
}

/** The chains a section declares (`:NAME - [0:0]`), per table. */
function declared(script: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  let table = "";
  for (const line of script.split("\n")) {
    if (line.startsWith("*")) out[table = line.slice(1)] = [];
    else if (line.startsWith(":")) out[table].push(line.slice(1).split(" ")[0]);
  }
  return out;
}

const lines = (script: string, prefix: string) =>
  script.split("\n").filter((l) => l.startsWith(prefix));

Deno.test("IptablesSyncer's first plan is a full section: every fixed chain, the canaries, and each service's chains", () => {
  const { state, sync } = setup();
  state.onEvent({ kind: "Service", current: web() });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11"]) });
  const plan = sync();
  assert.equal(plan.full, true);
  assert.match(plan.script, /^# kube-nftproxy IPv4 full sync\n/);
  const d = declared(plan.script);
  for (const chain of ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"]) {
    assert.ok(d.nat.includes(chain), chain);
  }
  assert.ok(d.filter.includes("KUBE-FORWARD"));
  assert.deepEqual(d.mangle, ["KUBE-PROXY-CANARY"]);
  assert.ok(d.nat.includes(WEB.cluster));
  assert.equal(d.nat.filter((c) => c.startsWith("KUBE-SEP-")).length, 1);
});

Deno.test("IptablesSyncer's full section for iptables-legacy declares every nat chain first, by name, KUBE-MARK-MASQ last, with the same rules", () => {
  const { state, syncer } = setup();
  state.onEvent({ kind: "Service", current: web() });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11", "10.244.1.12"]) });
  state.onEvent({ kind: "Service", current: web("db", "10.96.0.11") });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.2.11"], "db") });
  const { changed } = state.takeChanges();
  const plan = syncer.plan(
    state,
    { full: true, changed },
    iptablesRenderOptions(config, state, "IPv4"),
  );
  const nat = (script: string) => script.slice(script.indexOf("*nat"), script.indexOf("COMMIT"));
  const usual = [...plan.chunks()].join("");
  const sorted = [...plan.chunks({ sortedDeclarations: true })].join("");
  const body = nat(sorted).split("\n").slice(1).filter((l) => l !== "");
  const declarations = body.filter((l) => l.startsWith(":"));
  assert.deepEqual(body.slice(0, declarations.length), declarations, "declarations come first");
  const names = declarations.map((l) => l.slice(1).split(" ")[0]);
  assert.equal(names.at(-1), "KUBE-MARK-MASQ");
  assert.deepEqual(names.slice(0, -1), [...names.slice(0, -1)].sort());
  assert.ok(names.includes(WEB.cluster) && names.includes(DB.cluster));
  // The same section otherwise: the same lines, each chain's rules in the same order.
  const lineSet = (script: string) => nat(script).split("\n").slice(1).sort();
  assert.deepEqual(lineSet(sorted), lineSet(usual));
  const rulesOf = (script: string, chain: string) => lines(nat(script), `-A ${chain} `);
  for (const chain of names) assert.deepEqual(rulesOf(sorted, chain), rulesOf(usual, chain));
  assert.equal(sorted.slice(sorted.indexOf("COMMIT")), usual.slice(usual.indexOf("COMMIT")));
});

Deno.test("IptablesSyncer plans nothing without a change", () => {
  const { state, sync } = setup();
  state.onEvent({ kind: "Service", current: web() });
  sync();
  const plan = sync();
  assert.equal(plan.script, "");
  assert.equal(plan.servicePortsChanged, 0);
});

Deno.test("IptablesSyncer: an endpoint change rewrites that service's chains only, and no fixed chain", () => {
  const { state, sync } = setup();
  state.onEvent({ kind: "Service", current: web() });
  state.onEvent({ kind: "Service", current: web("db", "10.96.0.20") });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11"]) });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.21"], "db") });
  sync();
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11", "10.244.1.12"]) });
  const plan = sync();
  assert.equal(plan.full, false);
  assert.equal(plan.servicePortsChanged, 1);
  const d = declared(plan.script);
  assert.equal(d.filter, undefined, "no filter chain changes");
  assert.ok(d.nat.includes(WEB.cluster));
  assert.ok(!d.nat.includes("KUBE-SERVICES"), "the dispatch rule of web is the same");
  assert.ok(!d.nat.includes(DB.cluster), "declaring db's chain would flush it");
  // The new endpoint's chain is declared; the kept one, unchanged, is not.
  assert.equal(d.nat.filter((c) => c.startsWith("KUBE-SEP-")).length, 1);
  assert.match(lines(plan.script, `-A ${WEB.cluster} `).join("\n"), /--probability 0\.5/);
});

Deno.test("IptablesSyncer: a removed service's chains are flushed and deleted, and dispatch is rewritten", () => {
  const { state, sync } = setup();
  state.onEvent({ kind: "Service", current: web() });
  state.onEvent({ kind: "Service", current: web("db", "10.96.0.20") });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11"]) });
  sync();
  state.onEvent({ kind: "Service", previous: web() });
  const plan = sync();
  const d = declared(plan.script);
  assert.ok(d.nat.includes("KUBE-SERVICES"));
  assert.ok(lines(plan.script, "-X ").includes(`-X ${WEB.cluster}`));
  assert.ok(d.nat.includes(WEB.cluster), "declared (flushed) before it is deleted");
  assert.ok(!lines(plan.script, "-A KUBE-SERVICES ").some((l) => l.includes("10.96.0.10")));
});

Deno.test("IptablesSyncer's full plan deletes per-service chains it applied before and no longer wants", () => {
  const { state, sync } = setup();
  state.onEvent({ kind: "Service", current: web() });
  state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11"]) });
  sync();
  state.onEvent({ kind: "EndpointSlice", previous: slice(["10.244.1.11"]) });
  const plan = sync(true);
  assert.equal(plan.full, true);
  const deleted = lines(plan.script, "-X ");
  assert.equal(deleted.filter((l) => l.startsWith("-X KUBE-SEP-")).length, 1);
  assert.ok(declared(plan.script).nat.includes(WEB.cluster), "web itself stays");
});

Deno.test("IptablesSyncer remembers a plan only once committed, and forgets everything on reset()", () => {
  const { state, syncer } = setup();
  state.onEvent({ kind: "Service", current: web() });
  const options = iptablesRenderOptions(config, state, "IPv4");
  const { changed } = state.takeChanges();
  assert.equal(syncer.hasApplied, false);
  const first = syncer.plan(state, { full: false, changed }, options);
  assert.equal(first.full, true, "nothing applied yet: full");
  const again = syncer.plan(state, { full: false, changed }, options);
  assert.equal(again.script, first.script, "not committed: planned again");
  again.commit();
  assert.equal(syncer.hasApplied, true);
  assert.equal(syncer.plan(state, { full: false, changed }, options).script, "");
  syncer.reset();
  assert.equal(syncer.plan(state, { full: false, changed }, options).full, true);
});
