/**
 * The fixed skeleton of one nft family's table: base chains, dispatch chains, and the fixed
 * set of sets and maps every service's state lives in as elements. It depends only on the
 * render options, so it changes only in full syncs.
 *
 * How a packet is served (see nft/README.md for the picture):
 * - `services` looks up `daddr . l4proto . dport` in `service-ips` (cluster, external and
 *   load-balancer IPs) or `l4proto . dport` in `service-nodeports` (node IPs in `nodeport-ips`,
 *   or any local address: `fib daddr type local`).
 * - Cluster IPs go straight to a shared balancer chain (`lb-N`, or `local-lb-N` for
 *   internalTrafficPolicy Local); external entries go through the service's `external-…`
 *   chain (see service_fragment.ts).
 * - A balancer DNATs with `daddr . l4proto . dport . <pick> mod N` as the key into
 *   `cluster-endpoints` or `local-endpoints`: each entry point (cluster IP, external IP, LB IP)
 *   has its own N elements there; a node port has N in `cluster-nodeport-endpoints` (keyed
 *   `l4proto . dport . numgen …`), which the balancer's second rule reads when the first
 *   finds no element for the packet's address. The pick is the scheduler's (scheduler.ts):
 *   `numgen random`, `numgen inc` or `jhash … saddr`, all 32-bit integers like the maps' key.
 *
 * @module
 */
import { endpointMapName, NAMES, NFT_PROTOCOLS } from "./names.ts";
import type { ChainWithRules, Skeleton } from "./fragment.ts";
import type { NftRenderOptions } from "./options.ts";
import type { ElementDef, SetDef } from "./transaction.ts";

/** Largest number of ClientIP affinity entries per family. */
export const AFFINITY_MAP_SIZE = 262144;

/** Renders the fixed skeleton of one table. */
export function renderSkeleton(options: NftRenderOptions): Skeleton {
  const f = options.family;
  const addr = f === "ip" ? "ipv4_addr" : "ipv6_addr";
  const mark = `0x${(1 << options.masqueradeBit >>> 0).toString(16).padStart(8, "0")}`;
  const key3 = `${f} daddr . meta l4proto . th dport`;
  const filter = (
    name: string,
    hook: "prerouting" | "forward" | "input" | "output",
    priority: number,
    rules: string[],
  ): ChainWithRules => ({
    def: { name, hook: { type: "filter", hook, priority } },
    rules,
  });
  const nat = (
    name: string,
    hook: "prerouting" | "output" | "postrouting",
    priority: number | string,
    rules: string[],
  ): ChainWithRules => ({
    def: { name, hook: { type: "nat", hook, priority } },
    rules,
  });
  const plain = (name: string, rules: string[]): ChainWithRules => ({ def: { name }, rules });
  const newConn = (chain: string) => `ct state new jump ${chain}`;

  const masqueradeClusterIPs = options.masqueradeAll
    ? [`${f} daddr @${NAMES.clusterIPs} jump ${NAMES.markForMasquerade}`]
    : options.notLocalMatch
    ? [`${f} daddr @${NAMES.clusterIPs} ${options.notLocalMatch} jump ${NAMES.markForMasquerade}`]
    : [];
  // Where node ports answer: the addresses in `nodeport-ips`, or every local one but loopback.
  const nodePortDaddr = options.nodePortsOnAllAddresses
    ? `fib daddr type local ${f} daddr != ${f === "ip" ? "127.0.0.0/8" : "::1"}`
    : `${f} daddr @${NAMES.nodeportIPs}`;
  const clusterIPRules = [`${f} daddr @${NAMES.clusterIPs} reject`];
  for (const cidr of options.serviceCIDRs) clusterIPRules.push(`${f} daddr ${cidr} drop`);
  // IPv4 ClientIP: right after DNAT, a packet carrying a service port's id records its endpoint
  // (affinity.ts). Not later: forwarding resets the priority.
  const affinityRecords = f === "ip6" ? [] : [`meta priority vmap @${NAMES.affinityRecorders}`];

  const chains: ChainWithRules[] = [
    filter(NAMES.filterPrerouting, "prerouting", -110, [newConn(NAMES.firewallCheck)]),
    filter(NAMES.filterInput, "input", -110, [
      newConn(NAMES.nodeportEndpointsCheck),
      newConn(NAMES.serviceEndpointsCheck),
    ]),
    filter(NAMES.filterForward, "forward", -110, [
      newConn(NAMES.serviceEndpointsCheck),
      newConn(NAMES.clusterIPsCheck),
    ]),
    filter(NAMES.filterOutput, "output", -110, [
      newConn(NAMES.serviceEndpointsCheck),
      newConn(NAMES.nodeportEndpointsCheck),
      newConn(NAMES.firewallCheck),
    ]),
    filter(NAMES.filterOutputPostDnat, "output", -90, [
      ...affinityRecords,
      newConn(NAMES.clusterIPsCheck),
    ]),
    ...(f === "ip6"
      ? []
      : [filter(NAMES.filterPreroutingPostDnat, "prerouting", -90, affinityRecords)]),
    nat(NAMES.natPrerouting, "prerouting", "dstnat", [`jump ${NAMES.services}`]),
    nat(NAMES.natOutput, "output", -100, [`jump ${NAMES.services}`]),
    nat(NAMES.natPostrouting, "postrouting", "srcnat", [
      `ct status dnat ${f} saddr . ${f} daddr @${NAMES.hairpinEndpoints} jump ${NAMES.markForMasquerade}`,
      `jump ${NAMES.masquerading}`,
    ]),
    plain(NAMES.services, [
      ...masqueradeClusterIPs,
      `${key3} vmap @${NAMES.serviceIPs}`,
      `${nodePortDaddr} meta l4proto . th dport vmap @${NAMES.serviceNodeports}`,
    ]),
    plain(NAMES.markForMasquerade, [`meta mark set meta mark | ${mark}`]),
    plain(NAMES.masquerading, [
      `meta mark & ${mark} == 0 return`,
      `meta mark set meta mark ^ ${mark}`,
      "masquerade fully-random",
    ]),
    plain(NAMES.serviceEndpointsCheck, [`${key3} vmap @${NAMES.noEndpointServices}`]),
    plain(NAMES.nodeportEndpointsCheck, [
      `${nodePortDaddr} meta l4proto . th dport vmap @${NAMES.noEndpointNodeports}`,
    ]),
    plain(NAMES.clusterIPsCheck, clusterIPRules),
    plain(NAMES.firewallCheck, [
      `${key3} . ${f} saddr @${NAMES.firewallAllow} return`,
      `${key3} @${NAMES.firewallIPs} drop`,
    ]),
    plain(NAMES.rejectChain, ["reject"]),
  ];
  const serviceKey = `${addr} . inet_proto . inet_service`;
  const portKey = "inet_proto . inet_service";
  const endpointMaps = [false, true].flatMap((nodePort) =>
    [false, true].flatMap((local) =>
      NFT_PROTOCOLS.map((p): SetDef => ({
        kind: "map",
        name: endpointMapName(local, p, nodePort),
        type: `typeof ${nodePort ? "meta l4proto . th dport" : key3} . numgen random mod 1 : ` +
          `${f} daddr . ${p} dport`,
        comment: `${nodePort ? "node port" : "entry point"} and index to ` +
          `${local ? "this node's" : "all"} ${p} endpoints`,
      }))
    )
  );
  const sets: SetDef[] = [
    { kind: "set", name: NAMES.clusterIPs, type: `type ${addr}`, comment: "Active ClusterIPs" },
    {
      kind: "set",
      name: NAMES.nodeportIPs,
      type: `type ${addr}`,
      comment: "Node addresses that accept node ports",
    },
    {
      kind: "map",
      name: NAMES.serviceIPs,
      // `counter`: each element counts the connections it dispatches (nat sees first packets).
      type: `type ${serviceKey} : verdict; counter`,
      comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    },
    {
      kind: "map",
      name: NAMES.serviceNodeports,
      type: `type ${portKey} : verdict; counter`,
      comment: "NodePort traffic",
    },
    {
      kind: "map",
      name: NAMES.noEndpointServices,
      type: `type ${serviceKey} : verdict`,
      comment: "vmap to drop or reject packets to services with no endpoints",
    },
    {
      kind: "map",
      name: NAMES.noEndpointNodeports,
      type: `type ${portKey} : verdict`,
      comment: "vmap to drop or reject packets to service nodeports with no endpoints",
    },
    {
      kind: "set",
      name: NAMES.firewallIPs,
      type: `type ${serviceKey}`,
      comment: "LoadBalancer IPs with loadBalancerSourceRanges",
    },
    {
      kind: "set",
      name: NAMES.firewallAllow,
      type: `type ${serviceKey} . ${addr}`,
      flags: ["interval"],
      comment: "Sources allowed by loadBalancerSourceRanges",
    },
    ...endpointMaps,
    {
      kind: "set",
      name: NAMES.hairpinEndpoints,
      type: `type ${addr} . ${addr}`,
      comment: "endpoint . endpoint: a pod reaching its own service and landing on itself",
    },
    ...(f === "ip6" ? [] : [{
      kind: "map" as const,
      name: NAMES.affinity,
      type: `type ${addr} . classid : ${addr} . inet_service`,
      flags: ["dynamic", "timeout"],
      size: AFFINITY_MAP_SIZE,
      dynamic: true,
      comment: "ClientIP affinity: client . service port id to the endpoint it sticks to",
    }, {
      kind: "map" as const,
      name: NAMES.affinityIds,
      type: `type ${serviceKey} : classid`,
      comment: "ClientIP affinity: entry point to its service port's id",
    }, {
      kind: "map" as const,
      name: NAMES.affinityNodeportIds,
      type: `type ${portKey} : classid`,
      comment: "ClientIP affinity: node port to its service port's id",
    }, {
      kind: "map" as const,
      name: NAMES.affinityRecorders,
      type: "type classid : verdict",
      comment: "ClientIP affinity: service port id to the chain recording affinity",
    }]),
  ];
  const elements = (options.nodePortsOnAllAddresses ? [] : options.nodePortIPs).map((
    ip,
  ): ElementDef => ({
    set: NAMES.nodeportIPs,
    key: ip,
    comment: "node address",
  }));
  return { chains, sets, elements };
}
