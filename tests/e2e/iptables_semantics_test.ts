/**
 * The data-plane semantics suite in iptables mode: the same table of packet-flow cases as the
 * nft suite (`flowCases`, `checkFlow` from semantics_cases.ts), through the rules the proxy
 * programs with `iptables-restore`, with the iptables-nft and the iptables-legacy back ends.
 *
 * Importing semantics_test.ts also registers its nft tests in this file's run until the cases
 * move to a module of their own.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, type Topology } from "../netns/topology.ts";
import type { IptablesBackend } from "../../src/apply/iptables.ts";
import { startIptablesProxy } from "./iptables_harness.ts";
import { semanticsCluster } from "./semantics_cluster.ts";
import { checkAll, DETECT_LOCAL_VARIANTS, flowCases, masqueradeCase } from "./semantics_cases.ts";

const gate = await netnsTestGate();

async function withProxy(
  options: { args?: string[]; backend?: IptablesBackend },
  fn: (topo: Topology) => Promise<void>,
): Promise<void> {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const proxy = await startIptablesProxy(topo, semanticsCluster(topo), options);
    try {
      await fn(topo);
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
}

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

for (const backend of ["nft", "legacy"] as const) {
  test(`iptables data plane (iptables-${backend}): every service behaviour, from clients, pods and the node`, () =>
    withProxy({ backend }, (topo) => checkAll(topo, flowCases(topo))));
}

test("iptables masquerade: masqueradeAll masquerades pods too", () =>
  withProxy({ args: ["--masquerade-all"] }, (topo) =>
    checkAll(topo, [
      masqueradeCase("pod-b", "masqueraded"),
      masqueradeCase("client", "masqueraded"),
    ])));

test("iptables masquerade: with no local-traffic detector, off-cluster clients keep their address", () =>
  withProxy(
    { args: ["--cluster-cidr="] },
    (topo) =>
      checkAll(topo, [masqueradeCase("client", "preserved"), masqueradeCase("pod-b", "preserved")]),
  ));

for (const [mode, args] of DETECT_LOCAL_VARIANTS) {
  test(`iptables masquerade: detect-local ${mode} tells pods from off-cluster clients`, () =>
    withProxy({ args: [...args] }, (topo) =>
      checkAll(topo, [
        masqueradeCase("client", "masqueraded"),
        masqueradeCase("pod-b", "preserved"),
      ])));
}

test("iptables masquerade: a configured mark bit is used and still masquerades", () =>
  withProxy({ args: ["--iptables-masquerade-bit=5"] }, async (topo) => {
    const saved = await topo.exec(topo.node.ns, ["iptables-nft-save", "-t", "nat"]);
    assert.match(saved.stdout, /-A KUBE-MARK-MASQ -j MARK --set-xmark 0x20\/0x20/);
    await checkAll(topo, [masqueradeCase("client", "masqueraded")]);
  }));
