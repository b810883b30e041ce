/**
 * The reference the iptables benchmark compares a sync with: the IPv4 ClusterIP services of a
 * proxy state written in upstream kube-proxy's classic iptables layout, as its full sync hands
 * it to `iptables-restore --noflush`.
 *
 * That layout (see /work/shared/seeds/kube-proxy-iptables-proxier-analysis.md) declares every
 * chain first (`:KUBE-SVC-… - [0:0]`, `:KUBE-SEP-… - [0:0]`), then writes each service's
 * `KUBE-SERVICES` rule, its `KUBE-SVC-` chain (masquerade rule, then a `statistic --mode random`
 * cascade) and one `KUBE-SEP-` chain per endpoint (hairpin mark, DNAT). Above 1,000 endpoints
 * upstream switches to its large-cluster mode and leaves the comments off the per-endpoint rules;
 * `comments: true` keeps them (the larger script a smaller cluster gets). Only what decides the
 * load time is written: node ports, external and load-balancer IPs and the filter rules of
 * services without endpoints are left out (the synthetic clusters have none by default). Chain
 * names are upstream's hashes (names.ts computes them the same way).
 *
 * Pure: state in, script text out.
 *
 * @module
 */
import { formatEndpoint } from "../src/model/endpoint.ts";
import { familyOf, formatServicePortName } from "../src/model/service_port.ts";
import { endpointChainName, serviceChainNames } from "../src/render/iptables/names.ts";
import { probability } from "../src/render/iptables/ruleset.ts";
import type { SyncInput } from "../src/render/planner.ts";

/** Upstream's `largeClusterEndpointsThreshold`. */
export const LARGE_CLUSTER_ENDPOINTS = 1000;

/** Options of {@link renderUpstreamIptablesLayout}. */
export interface UpstreamIptablesOptions {
  /** The pod network: traffic from outside it to a cluster IP is masqueraded. */
  clusterCIDR: string;
  /** Comments on per-endpoint rules. Default: as upstream, only up to 1,000 endpoints. */
  comments?: boolean;
}

/** The `iptables-restore --noflush` input of upstream's full sync of `input` (IPv4). */
export function renderUpstreamIptablesLayout(
  input: SyncInput,
  options: UpstreamIptablesOptions,
): string {
  const keys = [...input.services.keys()].sort();
  let total = 0;
  for (const key of keys) total += input.endpoints.get(key)?.length ?? 0;
  const comments = options.comments ?? total <= LARGE_CLUSTER_ENDPOINTS;
  const chains: string[] = [];
  const rules: string[] = [];
  for (const key of keys) {
    const port = input.services.get(key)!;
    const clusterIP = port.clusterIPs.find((ip) => familyOf(ip) === "IPv4");
    const endpoints = (input.endpoints.get(key) ?? []).filter((ep) =>
      ep.ready && familyOf(ep.ip) === "IPv4"
    );
    if (clusterIP === undefined || endpoints.length === 0) continue;
    const name = formatServicePortName(port.name);
    const p = port.name.protocol.toLowerCase();
    const svc = serviceChainNames(port.name).cluster;
    const match = `-m comment --comment "${name} cluster IP" -m ${p} -p ${p} -d ${clusterIP} ` +
      `--dport ${port.port}`;
    chains.push(`:${svc} - [0:0]`);
    rules.push(`-A KUBE-SERVICES ${match} -j ${svc}`);
    rules.push(`-A ${svc} ${match} ! -s ${options.clusterCIDR} -j KUBE-MARK-MASQ`);
    const seps = endpoints.map((ep) => {
      const id = formatEndpoint(ep);
      return { ep, id, chain: endpointChainName(port.name, id) };
    });
    seps.forEach(({ id, chain }, i) => {
      const why = comments ? `-m comment --comment "${name} -> ${id}" ` : "";
      const left = seps.length - i;
      const pick = left > 1 ? `-m statistic --mode random --probability ${probability(left)} ` : "";
      rules.push(`-A ${svc} ${why}${pick}-j ${chain}`);
    });
    for (const { ep, id, chain } of seps) {
      const why = comments ? `-m comment --comment ${name} ` : "";
      chains.push(`:${chain} - [0:0]`);
      rules.push(`-A ${chain} ${why}-s ${ep.ip}/32 -j KUBE-MARK-MASQ`);
      rules.push(`-A ${chain} ${why}-m ${p} -p ${p} -j DNAT --to-destination ${id}`);
    }
  }
  return [
    "*filter",
    ":KUBE-NODEPORTS - [0:0]",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-EXTERNAL-SERVICES - [0:0]",
    ":KUBE-FORWARD - [0:0]",
    ":KUBE-PROXY-FIREWALL - [0:0]",
    "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" ' +
    "-m mark --mark 0x4000/0x4000 -j ACCEPT",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" ' +
    "-m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
    "COMMIT",
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-NODEPORTS - [0:0]",
    ":KUBE-POSTROUTING - [0:0]",
    ":KUBE-MARK-MASQ - [0:0]",
    ...chains,
    "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
    "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" ' +
    "-j MASQUERADE --random-fully",
    "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
    ...rules,
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be ' +
    'the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
    "COMMIT",
    "",
  ].join("\n");
}
