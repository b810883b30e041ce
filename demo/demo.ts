/**
 * `deno task demo`: the proxy on a throwaway cluster of network namespaces.
 *
 * With root and `nft`, it builds a node, three pods answering with their own names and an
 * off-cluster client; runs the real proxy (`main.ts --from-file demo/cluster.yaml`) in the node;
 * sends requests to the `web` ClusterIP and prints which pod answered each; shows that a
 * service without endpoints is refused at once; then removes everything. Without root or `nft`
 * it prints the script it would apply instead.
 *
 * @module
 */
import { DEFAULT_CONFIG } from "../src/config/config.ts";
import { NftPlanner } from "../src/render/nft/planner.ts";
import { parseClusterFile } from "../src/source/file_source.ts";
import { ProxyState } from "../src/tracker/proxy_state.ts";
import { canUseNetns } from "../tests/netns/netns.ts";
import { createTopology, probe, type Topology } from "../tests/netns/topology.ts";
import { cacheProxyDependencies } from "../tests/e2e/proxy_harness.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../tests/fixtures/ip_plan.ts";

const CLUSTER = new URL("./cluster.yaml", import.meta.url).pathname;
const MAIN = new URL("../main.ts", import.meta.url).pathname;
const REQUESTS = 30;

async function main(): Promise<number> {
  const support = await canUseNetns();
  if (!support.ok) return printScriptInstead(support.reason ?? "");
  await cacheProxyDependencies();
  console.log("building namespaces: a node, three pods (pod-a, pod-b, pod-c) and a client ...");
  const topo = await createTopology();
  try {
    return await demonstrate(topo);
  } finally {
    await topo.cleanup();
    console.log("removed every namespace the demo made.");
  }
}

async function demonstrate(topo: Topology): Promise<number> {
  const proxy = topo.startProcess(topo.node.ns, [
    Deno.execPath(),
    "run",
    "--cached-only",
    "-A",
    MAIN,
    "--mode=nft",
    `--from-file=${CLUSTER}`,
    `--hostname-override=${NODE_NAME}`,
    `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
    "-v=1",
  ], { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" } });
  await proxy.waitForOutput(/\bsynced /, 20_000);
  console.log(`kube-nftproxy is running in the node namespace and has programmed it.\n`);

  console.log(
    `client ${topo.client.ip4} -> web ClusterIP 10.96.0.10:80, ${REQUESTS} new connections:`,
  );
  const results = await probe(topo, topo.client.ns, "10.96.0.10:80", { count: REQUESTS });
  const counts = new Map<string, number>();
  const answers = results.map((r) => r.outcome === "ok" ? r.body : `(${r.outcome})`);
  answers.forEach((a) => counts.set(a, (counts.get(a) ?? 0) + 1));
  for (let i = 0; i < answers.length; i += 10) {
    console.log(`  ${answers.slice(i, i + 10).join(" ")}`);
  }
  console.log("spread:");
  for (const [name, n] of [...counts].sort()) {
    console.log(`  ${name.padEnd(8)} ${"#".repeat(n)} ${n}`);
  }
  const v6 = await probe(topo, topo.client.ns, "[fd00:10:96::10]:80", { count: 6 });
  console.log(
    `IPv6 ClusterIP [fd00:10:96::10]:80 answered by: ${
      v6.map((r) => r.outcome === "ok" ? r.body : r.outcome).join(" ")
    }`,
  );
  const [empty] = await probe(topo, topo.client.ns, "10.96.0.11:80", { timeoutMs: 3000 });
  console.log(
    `nothing-here 10.96.0.11:80 (no endpoints): ${empty.outcome} after ${Math.round(empty.ms)} ms`,
  );
  await proxy.stop();
  const spread = [...counts.keys()].filter((k) => k.startsWith("pod-")).length;
  return spread === 3 && empty.outcome === "refused" ? 0 : 1;
}

function printScriptInstead(reason: string): number {
  const state = new ProxyState({ hostname: NODE_NAME, log: () => {} });
  for (
    const { kind, object } of parseClusterFile(Deno.readTextFileSync(CLUSTER)).objects.values()
  ) {
    state.onEvent({ kind, current: object });
  }
  const { changed } = state.takeChanges();
  const config = {
    ...DEFAULT_CONFIG,
    hostname: NODE_NAME,
    clusterCIDRs: [POD_CIDR_V4, POD_CIDR_V6],
  };
  console.log(new NftPlanner(config).plan(state, { full: true, changed }).script);
  console.log(
    `# demo: sent no packets (${reason}); above is the nft script the proxy would apply for ` +
      `demo/cluster.yaml. As root on Linux, \`deno task demo\` runs it in throwaway network ` +
      `namespaces and shows which pod answers each request.`,
  );
  return 0;
}

if (import.meta.main) Deno.exit(await main());
