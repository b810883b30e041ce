/**
 * `explain` against the kernel: for every data-plane semantics case, the real proxy programs a
 * node namespace and the case's connection is made (as the semantics suite does), and the
 * explanation computed in-process from the same cluster file and flags must predict what the
 * kernel did — the endpoints reached, masquerading, refusal or drop. Each is asked with `--live`,
 * so it also reads the node's kernel, which must hold exactly the explained rules (traffic,
 * counters and affinity entries notwithstanding).
 */
import assert from "node:assert/strict";
import { dryRunNft } from "../../src/dryrun/dry_run.ts";
import { explainCommand } from "../../src/explain/command.ts";
import type { KernelAgreement } from "../../src/explain/live.ts";
import type { Explanation } from "../../src/explain/explain.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, type Topology } from "../netns/topology.ts";
import { startProxy } from "./proxy_harness.ts";
import { checkFlow, type FlowCase, flowCases } from "./semantics_cases.ts";
import { semanticsCluster } from "./semantics_cluster.ts";
import { stringify } from "./yaml.ts";

const gate = await netnsTestGate();

/** The address the case's sender uses, in the target's family. */
function sourceAddress(topo: Topology, c: FlowCase): string {
  const v6 = c.to.startsWith("[");
  if (c.from === "client") return v6 ? topo.client.ip6! : topo.client.ip4;
  if (c.from === "node") return v6 ? topo.node.ip6! : topo.node.ip4;
  const pod = topo.pods.find((p) => p.name === c.from)!;
  return v6 ? pod.ip6! : pod.ip4;
}

async function explainCase(
  topo: Topology,
  yaml: string,
  c: FlowCase,
): Promise<Explanation & { kernel: KernelAgreement }> {
  const out: string[] = [];
  const errors: string[] = [];
  const code = await explainCommand([
    `--from=${sourceAddress(topo, c)}`,
    `--to=${c.to}/${c.proto ?? "tcp"}`,
    "--output=json",
    "--from-file=cluster.yaml",
    `--hostname-override=${NODE_NAME}`,
    `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
    "--live",
  ], {
    readTextFile: () => Promise.resolve(yaml),
    print: (text) => out.push(text),
    printError: (line) => errors.push(line),
    kernelDiff: async (script) => (await dryRunNft(script, { netns: topo.node.ns })).diff,
  });
  assert.equal(code, 0, errors.join("\n"));
  return JSON.parse(out.join(""));
}

/** Asserts that the explanation predicts the case's expected (and kernel-checked) outcome. */
function assertPredicts(topo: Topology, c: FlowCase, e: Explanation): void {
  const said = `${c.name}: explain said ${JSON.stringify(e)}`;
  if ("outcome" in c.expect) {
    if (c.expect.outcome === "refused") {
      assert.ok(e.verdict === "reject" || (e.verdict === "no-match" && e.toNode), said);
    } else {
      assert.ok(e.verdict === "drop" || (e.verdict === "no-match" && !e.toNode), said);
    }
    return;
  }
  assert.equal(e.verdict, "dnat", said);
  const podOf = (ip: string) =>
    topo.pods.find((p) => p.ip4 === ip || p.ip6 === ip)?.name ?? `unknown ${ip}`;
  const predicted = [...new Set(e.endpoints.map((ep) => podOf(ep.ip)))].sort();
  if (c.expect.sticky) {
    assert.ok(e.sticky, said);
    assert.ok(c.expect.reach.every((pod) => predicted.includes(pod)), said);
  } else {
    assert.deepEqual(predicted, [...c.expect.reach].sort(), said);
  }
  for (const ep of e.endpoints) assert.equal(ep.probability, 1 / e.endpoints.length, said);
  if (c.expect.source !== undefined) {
    assert.equal(e.masquerade, c.expect.source === "masqueraded", said);
  }
}

Deno.test({
  name: "explain predicts the kernel on every data-plane semantics case",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    gate.assertUsable();
    const topo = await createTopology();
    try {
      const objects = semanticsCluster(topo);
      const yaml = stringify(objects);
      const proxy = await startProxy(topo, objects);
      const failures: string[] = [];
      try {
        for (const c of flowCases(topo)) {
          try {
            await checkFlow(topo, c);
          } catch (err) {
            failures.push(`✗ kernel: ${(err as Error).message}`);
            continue;
          }
          try {
            const e = await explainCase(topo, yaml, c);
            assertPredicts(topo, c, e);
            assert.ok(
              e.kernel.matches,
              `${c.name}: the live rules differ: ${JSON.stringify(e.kernel)}`,
            );
          } catch (err) {
            failures.push(`✗ explain: ${(err as Error).message}`);
          }
        }
      } finally {
        await proxy.stop();
      }
      assert.equal(failures.length, 0, `\n${failures.join("\n")}`);
    } finally {
      await topo.cleanup();
    }
  },
});
