/**
 * Captures what the proxy reads back from the kernel, as one nft release prints it, into
 * `tests/fixtures/nft/<version>/`: the real proxy programs the semantics cluster (plus an SCTP
 * service) into a topology, clients make connections (counters, affinity entries), then the
 * listings the readback parses are saved — `nft list table` (dry run, `explain --live`) and
 * `nft -j list map` of the dispatch maps (per-service counters) and of the affinity map. The
 * script the proxy wants for that cluster goes to `tests/fixtures/nft/semantics-cluster.nft` (a
 * dry run against an empty namespace: the same for every release).
 *
 * Run once per release, as root (a second argument names the directory instead of the version):
 * ```sh
 * deno run -A tests/compat/capture_fixtures.ts                          # the host's nft: 1.0.6
 * deno run -A tests/compat/capture_fixtures.ts tests/compat/nft-1.1.3   # Debian 13's: 1.1.3
 * # the same nft with /etc/protocols (package netbase) in the root: names instead of numbers
 * cp /etc/protocols /var/cache/knp/trixie-nft/etc/ &&
 *   deno run -A tests/compat/capture_fixtures.ts tests/compat/nft-1.1.3 1.1.3-protocols;
 *   rm /var/cache/knp/trixie-nft/etc/protocols
 * ```
 * The unit tests in `src/dryrun/table_image_compat_test.ts` and
 * `src/apply/service_counters_test.ts` read the files.
 *
 * @module
 */
import { createTopology, probe } from "../netns/topology.ts";
import { startProxy } from "../e2e/proxy_harness.ts";
import { ADDR, NODE_PORTS, semanticsCluster } from "../e2e/semantics_cluster.ts";
import { endpointSlice, service } from "../fixtures/objects.ts";
import { POD_PORT } from "../fixtures/ip_plan.ts";
import { runNft } from "../../src/apply/nft.ts";
import { createNamespace, deleteNamespace, run, shortId } from "../netns/netns.ts";
import { stringify } from "../e2e/yaml.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";

/** The SCTP service added to the semantics cluster: every protocol appears in the listings. */
const SCTP_ADDR = "10.96.0.30";

const nftPath = Deno.args[0] ?? "nft";
const version = /v(\d+\.\d+\.\d+)/.exec((await runNft(["--version"], { nftPath })).stdout)?.[1];
if (version === undefined) throw new Error(`cannot tell the version of ${nftPath}`);
const dir = new URL(`../fixtures/nft/${Deno.args[1] ?? version}/`, import.meta.url).pathname;
await Deno.mkdir(dir, { recursive: true });

const topo = await createTopology();
try {
  const objects = [
    ...semanticsCluster(topo),
    service({
      name: "sctp",
      clusterIPs: [SCTP_ADDR],
      ports: [{ name: "s", port: 90, protocol: "SCTP" }],
    }),
    endpointSlice({
      name: "sctp-v4",
      service: "sctp",
      ports: [{ name: "s", port: POD_PORT, protocol: "SCTP" }],
      endpoints: [topo.pods[0].ip4],
    }),
  ];
  const proxy = await startProxy(topo, objects, { env: { KUBE_NFTPROXY_NFT: nftPath } });
  try {
    // Connections that count (and one that leaves an affinity entry).
    await probe(topo, topo.client.ns, `${ADDR.web}:80`, { count: 3 });
    await probe(topo, topo.client.ns, `[${ADDR.web6}]:80`, { count: 2 });
    await probe(topo, topo.client.ns, `${ADDR.web}:80`, { proto: "udp" });
    await probe(topo, topo.client.ns, `${topo.node.ip4}:${NODE_PORTS.nodePort}`, { count: 2 });
    await probe(topo, topo.client.ns, `${ADDR.sticky}:80`);
    const save = async (file: string, args: string[]) => {
      const out = await runNft(args, { nftPath, netns: topo.node.ns });
      if (out.code !== 0) throw new Error(`nft ${args.join(" ")}: ${out.stderr}`);
      await Deno.writeTextFile(`${dir}${file}`, out.stdout);
    };
    for (const family of ["ip", "ip6"]) {
      await save(`list-table-${family}.nft`, ["list", "table", family, "kube-nftproxy"]);
      for (const map of ["service-ips", "service-nodeports"]) {
        await save(`list-map-${family}-${map}.json`, [
          "-j",
          "list",
          "map",
          family,
          "kube-nftproxy",
          map,
        ]);
      }
    }
    await save("list-map-ip-affinity.json", [
      "-j",
      "list",
      "map",
      "ip",
      "kube-nftproxy",
      "affinity",
    ]);
    await saveScript(objects);
  } finally {
    await proxy.stop();
  }
} finally {
  await topo.cleanup();
}
console.log(`nft ${version}: fixtures in ${dir}`);

/** Writes the proxy's full-sync script for `objects` (its dry run in an empty namespace). */
async function saveScript(objects: Parameters<typeof stringify>[0]): Promise<void> {
  const ns = `knp-${shortId()}-script`;
  const file = await Deno.makeTempFile({ prefix: "knp-capture-", suffix: ".yaml" });
  try {
    await createNamespace(ns);
    await Deno.writeTextFile(file, stringify(objects));
    const main = new URL("../../main.ts", import.meta.url).pathname;
    const out = await run([
      Deno.execPath(),
      "run",
      "-A",
      main,
      `--from-file=${file}`,
      `--hostname-override=${NODE_NAME}`,
      `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
      "--dry-run",
    ], { ns, timeoutMs: 60_000, env: { KUBE_NFTPROXY_NFT: nftPath } });
    if (out.code !== 0) throw new Error(`dry run failed: ${out.stderr}`);
    const script = new URL("../fixtures/nft/semantics-cluster.nft", import.meta.url).pathname;
    await Deno.writeTextFile(script, out.stdout);
  } finally {
    await deleteNamespace(ns);
    await Deno.remove(file);
  }
}
