/**
 * Switching a live node from kube-proxy to us: the node namespace is programmed by kube-proxy's
 * rules — its nftables mode's `ip`/`ip6 kube-proxy` tables, its iptables mode's `KUBE-*`
 * chains, or its ipvs mode's `kube-ipvs0`, `KUBE-*` ipsets and chains — and serves traffic; our daemon starts while a client keeps opening new connections
 * (TCP to a cluster IP in both families and to a node port); every one of them must succeed,
 * before, during and after the switch, and afterwards none of kube-proxy's rules may remain.
 *
 * kube-proxy's stale state is part of the picture: its rules also hold a Service deleted since
 * (`gone`), whose chains must go too.
 */
import assert from "node:assert/strict";
import { applyIptables } from "../../src/apply/iptables.ts";
import { DEFAULT_CONFIG } from "../../src/config/config.ts";
import { IptablesPlanner } from "../../src/render/iptables/planner.ts";
import type { RawObject } from "../../src/source/events.ts";
import { ProxyState } from "../../src/tracker/proxy_state.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type ProbeResult, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy } from "./proxy_harness.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import { upstreamNftScript } from "../fixtures/upstream_nft.ts";
import { upstreamIpvsState } from "../fixtures/upstream_ipvs.ts";
import {
  NODE_NAME,
  POD_CIDR_V4,
  POD_CIDR_V6,
  POD_PORT,
  SERVICE_CIDR_V4,
  SERVICE_CIDR_V6,
} from "../fixtures/ip_plan.ts";

const gate = await netnsTestGate();

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

const WEB = ["10.96.0.10", "fd00:10:96::10"] as const;
const GONE = ["10.96.0.11", "fd00:10:96::11"] as const;
const NODE_PORT = 30080;

/** The cluster as it is now: `web` (cluster IPs and a node port) on pod-a and pod-b. */
function cluster(topo: Topology, options: { withGone?: boolean } = {}): RawObject[] {
  const [a, b] = topo.pods;
  const objects: RawObject[] = [
    node(NODE_NAME, { ips: [topo.node.ip4, topo.node.ip6!] }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
    service({
      name: "web",
      type: "NodePort",
      clusterIPs: [...WEB],
      ports: [{ name: "http", port: 80, targetPort: POD_PORT, nodePort: NODE_PORT }],
    }),
    endpointSlice({ name: "web-4", service: "web", endpoints: [a.ip4, b.ip4] }),
    endpointSlice({
      name: "web-6",
      service: "web",
      addressType: "IPv6",
      endpoints: [a.ip6!, b.ip6!],
    }),
  ];
  if (options.withGone) {
    objects.push(
      service({ name: "gone", clusterIPs: [...GONE] }),
      endpointSlice({ name: "gone-4", service: "gone", endpoints: [topo.pods[2].ip4] }),
    );
  }
  return objects;
}

/** kube-proxy's nftables mode, as it left the node: `web`, and `gone` since deleted. */
async function loadUpstreamNft(topo: Topology): Promise<void> {
  const [a, b, c] = topo.pods;
  for (const [family, i] of [["ip", 0], ["ip6", 1]] as const) {
    const at = (ip: string) => family === "ip" ? `${ip}:${POD_PORT}` : `[${ip}]:${POD_PORT}`;
    const script = upstreamNftScript({
      family,
      serviceCIDRs: [family === "ip" ? SERVICE_CIDR_V4 : SERVICE_CIDR_V6],
      clusterCIDR: family === "ip" ? POD_CIDR_V4 : POD_CIDR_V6,
      nodeIPs: [family === "ip" ? topo.node.ip4 : topo.node.ip6!],
      services: [
        {
          name: "web",
          portName: "http",
          clusterIP: WEB[i],
          port: 80,
          nodePort: NODE_PORT,
          endpoints: [a, b].map((p) => at(family === "ip" ? p.ip4 : p.ip6!)),
        },
        {
          name: "gone",
          portName: "http",
          clusterIP: GONE[i],
          port: 80,
          endpoints: [at(family === "ip" ? c.ip4 : c.ip6!)],
        },
      ],
    });
    const loaded = await topo.exec(topo.node.ns, ["nft", "-f", "-"], { stdin: script });
    assert.equal(loaded.code, 0, loaded.stderr);
  }
}

/** kube-proxy's iptables mode, as it left the node (its classic layout, with `gone`). */
async function loadUpstreamIptables(topo: Topology): Promise<void> {
  const config = {
    ...DEFAULT_CONFIG,
    mode: "iptables" as const,
    hostname: NODE_NAME,
    clusterCIDRs: [POD_CIDR_V4, POD_CIDR_V6],
  };
  const state = new ProxyState({ hostname: NODE_NAME, log: () => {} });
  for (const object of cluster(topo, { withGone: true })) {
    state.onEvent({ kind: object.kind as "Service", current: object });
  }
  const plan = new IptablesPlanner(config).plan(state, {
    full: true,
    changed: state.takeChanges().changed,
  });
  await applyIptables(plan.script, { netns: topo.node.ns, backend: "nft" });
}

/**
 * kube-proxy's ipvs mode, as it left the node: the Service IPs on `kube-ipvs0` (a bridge here:
 * this kernel has no dummy links; down, as kube-proxy leaves its dummy), the `KUBE-*` ipsets and
 * chains of both families, and DNAT rules standing in for the IPVS virtual servers (this kernel
 * has no `ip_vs`). Returns the names of the sets.
 */
async function loadUpstreamIpvs(topo: Topology): Promise<string[]> {
  const [a, b] = topo.pods;
  const ns = topo.node.ns;
  const ok = async (cmd: string[], stdin?: string) => {
    const r = await topo.exec(ns, cmd, { stdin });
    assert.equal(r.code, 0, `${cmd.join(" ")}: ${r.stderr}`);
  };
  await ok(["ip", "link", "add", "kube-ipvs0", "type", "bridge"]);
  const names: string[] = [];
  for (const [family, i] of [["ip", 0], ["ip6", 1]] as const) {
    const at = (ip: string) => family === "ip" ? `${ip}:${POD_PORT}` : `[${ip}]:${POD_PORT}`;
    const state = upstreamIpvsState({
      family,
      clusterCIDR: family === "ip" ? POD_CIDR_V4 : POD_CIDR_V6,
      services: [{
        clusterIP: WEB[i],
        port: 80,
        nodePort: NODE_PORT,
        endpoints: [a, b].map((p) => at(family === "ip" ? p.ip4 : p.ip6!)),
      }],
    });
    await ok(["ipset", "restore"], state.ipsets);
    const restore = family === "ip" ? "iptables-nft-restore" : "ip6tables-nft-restore";
    await ok([restore, "--noflush"], state.iptables);
    for (const address of state.addresses) {
      await ok(["ip", "addr", "add", address, "dev", "kube-ipvs0"]);
    }
    names.push(...state.setNames);
  }
  return names;
}

/** What is left of kube-proxy's ipvs mode besides chains: `kube-ipvs0`, `KUBE-*` ipsets. */
async function ipvsLeftovers(topo: Topology): Promise<string[]> {
  const left: string[] = [];
  const link = await topo.exec(topo.node.ns, ["ip", "-o", "link", "show", "dev", "kube-ipvs0"]);
  if (link.code === 0) left.push("link kube-ipvs0");
  const sets = await topo.exec(topo.node.ns, ["ipset", "list", "-n"]);
  assert.equal(sets.code, 0, sets.stderr);
  left.push(
    ...sets.stdout.split("\n").filter((n) => n.startsWith("KUBE-")).map((n) => `ipset ${n}`),
  );
  return left;
}

/**
 * What is left of kube-proxy: its nft tables, and the iptables rules matching `kubeRule` (every
 * `KUBE-*` one when we run nft mode; in iptables mode, whose chains are kube-proxy's own, those
 * of the Service deleted since).
 */
async function upstreamLeftovers(topo: Topology, kubeRule: RegExp): Promise<string[]> {
  const left: string[] = [];
  const tables = (await topo.exec(topo.node.ns, ["nft", "list", "tables"])).stdout;
  left.push(...tables.split("\n").filter((l) => / kube-proxy$/.test(l)));
  for (const save of ["iptables-nft-save", "ip6tables-nft-save"]) {
    const saved = (await topo.exec(topo.node.ns, [save])).stdout;
    left.push(...saved.split("\n").filter((l) => kubeRule.test(l)).map((l) => `${save}: ${l}`));
  }
  return left;
}

/**
 * Opens new connections to every target, in rounds, until `done()` has held for two rounds
 * (bounded): every outcome, by target.
 */
async function keepConnecting(
  topo: Topology,
  targets: readonly string[],
  done: () => boolean,
): Promise<Map<string, ProbeResult[]>> {
  const seen = new Map(targets.map((t) => [t, [] as ProbeResult[]]));
  let after = 0;
  for (let round = 0; round < 120 && after < 2; round++) {
    if (done()) after++;
    await Promise.all(targets.map(async (target) => {
      seen.get(target)!.push(...await probe(topo, topo.client.ns, target, { count: 40 }));
    }));
  }
  return seen;
}

function failures(seen: Map<string, ProbeResult[]>): string[] {
  return [...seen].flatMap(([target, results]) => {
    const bad = results.filter((r) => r.outcome !== "ok" || !r.body.startsWith("pod-"));
    return bad.length === 0
      ? []
      : [`${target}: ${bad.length} of ${results.length} failed, e.g. ${JSON.stringify(bad[0])}`];
  });
}

/** Starts our daemon while connections keep coming; checks them all, and the leftovers. */
async function switchOver(
  topo: Topology,
  start: () => Promise<RunningProxy>,
  check: {
    doneWhenLogged: RegExp;
    kubeRule: RegExp;
    /** More of kube-proxy that must be gone afterwards (each item names what is left). */
    moreLeftovers?: () => Promise<string[]>;
  },
): Promise<RunningProxy | undefined> {
  const targets = [`${WEB[0]}:80`, `[${WEB[1]}]:80`, `${topo.node.ip4}:${NODE_PORT}`];
  const before = failures(await keepConnecting(topo, targets, () => true));
  assert.deepEqual(before, [], "kube-proxy's rules serve before the switch");
  let proxy: RunningProxy | undefined;
  let cleaned = false;
  const traffic = keepConnecting(topo, targets, () => cleaned);
  try {
    proxy = await start();
    // Other modes' rules and kube-proxy's tables go right after the first sync.
    await proxy.process.waitForOutput(check.doneWhenLogged, 20_000);
    cleaned = true;
    const seen = await traffic;
    assert.deepEqual(failures(seen), [], "no connection refused or lost during the switch");
    const total = [...seen.values()].reduce((n, r) => n + r.length, 0);
    assert.ok(total >= 6 * 40, `only ${total} connections were tried`);
    console.log(`switch-over: ${total} new connections while the daemon started, all answered`);
    assert.deepEqual(await upstreamLeftovers(topo, check.kubeRule), []);
    assert.deepEqual(await check.moreLeftovers?.() ?? [], []);
    assert.deepEqual(failures(await keepConnecting(topo, targets, () => true)), []);
    return proxy;
  } finally {
    cleaned = true;
    await traffic.catch(() => {});
    await proxy?.stop();
  }
}

test("switch-over from kube-proxy's nftables mode: no connection lost, its tables removed", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    await loadUpstreamNft(topo);
    await switchOver(topo, () => startProxy(topo, cluster(topo)), {
      doneWhenLogged:
        /removed kube-proxy's nftables tables left on this node \(ip kube-proxy, ip6 kube-proxy\)/,
      kubeRule: /KUBE-/,
    });
  } finally {
    await topo.cleanup();
  }
});

test("switch-over from kube-proxy's iptables mode to nft mode: no connection lost, KUBE-* removed", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    await loadUpstreamIptables(topo);
    await switchOver(topo, () => startProxy(topo, cluster(topo)), {
      doneWhenLogged: /\bsynced /,
      kubeRule: /KUBE-/,
    });
  } finally {
    await topo.cleanup();
  }
});

test("switch-over from kube-proxy's iptables mode to iptables mode: no connection lost, its stale chains removed", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    await loadUpstreamIptables(topo);
    await switchOver(topo, () => startIptablesProxy(topo, cluster(topo)), {
      doneWhenLogged: /\bsynced /,
      kubeRule: /default\/gone/,
    });
  } finally {
    await topo.cleanup();
  }
});

test("switch-over from kube-proxy's ipvs mode with its config unchanged: no connection lost, kube-ipvs0, KUBE-* ipsets and chains removed", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  const dir = await Deno.makeTempDir({ prefix: "knp-ipvs-" });
  try {
    const sets = await loadUpstreamIpvs(topo);
    assert.ok(sets.length > 0);
    assert.deepEqual((await ipvsLeftovers(topo)).length, 1 + sets.length, "the node looks ipvs");
    // The cluster's KubeProxyConfiguration, as kubeadm writes it for ipvs mode.
    const config = `${dir}/kube-proxy.yaml`;
    await Deno.writeTextFile(
      config,
      "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" +
        `mode: ipvs\nclusterCIDR: ${POD_CIDR_V4},${POD_CIDR_V6}\n` +
        "ipvs:\n  scheduler: rr\n  strictARP: true\n  syncPeriod: 30s\n  minSyncPeriod: 0s\n" +
        "  excludeCIDRs: null\n  tcpTimeout: 0s\n  tcpFinTimeout: 0s\n  udpTimeout: 0s\n" +
        "iptables:\n  masqueradeAll: false\n  masqueradeBit: 14\n",
    );
    let output = "";
    await switchOver(
      topo,
      async () => {
        const proxy = await startProxy(topo, cluster(topo), { args: [`--config=${config}`] });
        const stop = proxy.stop;
        return { ...proxy, stop: () => (output = proxy.output(), stop()) };
      },
      {
        doneWhenLogged: /removed what kube-proxy's ipvs mode left on this node: /,
        kubeRule: /KUBE-/,
        moreLeftovers: () => ipvsLeftovers(topo),
      },
    );
    assert.match(
      output,
      /mode ipvs runs kube-nftproxy's nftables back end .*applied: ipvs\.syncPeriod \(30s\), ipvs\.scheduler \(rr → round-robin\); ignored \(no nftables meaning\): ipvs\.strictARP \(true\)"\n/,
    );
    assert.match(output, /no ip_vs module in this kernel: no IPVS virtual servers to flush/);
    assert.match(
      output,
      /removed what kube-proxy's ipvs mode left on this node: link kube-ipvs0; .*ipsets KUBE-/,
    );
  } finally {
    await topo.cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});

test("switch-over from kube-proxy's ipvs mode to iptables mode: no connection lost, ipvs mode's chains, ipsets and kube-ipvs0 removed", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    await loadUpstreamIpvs(topo);
    await switchOver(topo, () => startIptablesProxy(topo, cluster(topo)), {
      doneWhenLogged: /removed what kube-proxy's ipvs mode left on this node: /,
      // The chains both modes name alike are the iptables mode's now; ipvs mode's own must go,
      // and every rule matching its ipsets.
      kubeRule: /KUBE-(NODE-PORT|LOAD-BALANCER|IPVS|SOURCE-RANGES)|:KUBE-FIREWALL|match-set/,
      moreLeftovers: () => ipvsLeftovers(topo),
    });
  } finally {
    await topo.cleanup();
  }
});
