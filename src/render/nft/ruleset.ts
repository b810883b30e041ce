/**
 * The nft ruleset of one family: the fixed skeleton (base chains, dispatch chains, sets and
 * maps) and the fragment each service port adds to it (its chains and its elements).
 *
 * Pure functions of state and options. Per-service state lives in elements of a fixed set of
 * maps and in plain rules of per-service chains — never in a set per service — so the kernel's
 * work grows linearly with the number of services (DESIGN.md §3).
 *
 * @module
 */
import type { Endpoint } from "../../model/endpoint.ts";
import { familyOf, type IPFamily, type ServicePort } from "../../model/service_port.ts";
import { selectEndpoints } from "../endpoints.ts";
import { NAMES, serviceChainName, serviceComment } from "./names.ts";
import type { ChainDef, ElementDef, NftFamily, SetDef } from "./transaction.ts";

/** How a family's ruleset is rendered. */
export interface NftRenderOptions {
  /** Table name (same in both families). */
  readonly table: string;
  readonly family: NftFamily;
  /** Bit of the packet mark that requests masquerading (0-31). */
  readonly masqueradeBit: number;
  /** Masquerade all traffic to services. */
  readonly masqueradeAll: boolean;
  /**
   * nft match for "this packet does NOT come from a local pod" (e.g. `ip saddr != 10.244.0.0/16`,
   * `iifname != "cbr0"`), or null when there is no local-traffic detector.
   */
  readonly notLocalMatch: string | null;
  /** Service CIDRs of this family: unallocated IPs inside them are dropped. */
  readonly serviceCIDRs: readonly string[];
}

/** A chain with its rules. */
export interface ChainWithRules {
  readonly def: ChainDef;
  readonly rules: readonly string[];
}

/** The fixed part of a table. */
export interface Skeleton {
  readonly chains: readonly ChainWithRules[];
  readonly sets: readonly SetDef[];
}

/** What one service port adds: its chains (name → rules) and its elements. */
export interface Fragment {
  readonly chains: ReadonlyMap<string, readonly string[]>;
  readonly elements: readonly ElementDef[];
}

/** The IP family an nft family programs. */
export function ipFamilyOf(family: NftFamily): IPFamily {
  return family === "ip" ? "IPv4" : "IPv6";
}

/** Renders the fixed skeleton of one table. */
export function renderSkeleton(options: NftRenderOptions): Skeleton {
  const { family } = options;
  const addr = family === "ip" ? "ipv4_addr" : "ipv6_addr";
  const mark = `0x${(1 << options.masqueradeBit >>> 0).toString(16).padStart(8, "0")}`;
  const filterHook = (hook: "forward" | "input" | "output", priority: number | string) => ({
    type: "filter" as const,
    hook,
    priority,
  });
  const checks = [
    `ct state new jump ${NAMES.serviceEndpointsCheck}`,
  ];
  const clusterIPRules = [`${family} daddr @${NAMES.clusterIPs} reject`];
  for (const cidr of options.serviceCIDRs) clusterIPRules.push(`${family} daddr ${cidr} drop`);
  const chains: ChainWithRules[] = [
    {
      def: { name: NAMES.filterForward, hook: filterHook("forward", -110) },
      rules: [...checks, `ct state new jump ${NAMES.clusterIPsCheck}`],
    },
    { def: { name: NAMES.filterInput, hook: filterHook("input", -110) }, rules: checks },
    { def: { name: NAMES.filterOutput, hook: filterHook("output", -110) }, rules: checks },
    {
      def: { name: NAMES.filterOutputPostDnat, hook: filterHook("output", -90) },
      rules: [`ct state new jump ${NAMES.clusterIPsCheck}`],
    },
    {
      def: {
        name: NAMES.natPrerouting,
        hook: { type: "nat", hook: "prerouting", priority: "dstnat" },
      },
      rules: [`jump ${NAMES.services}`],
    },
    {
      def: { name: NAMES.natOutput, hook: { type: "nat", hook: "output", priority: -100 } },
      rules: [`jump ${NAMES.services}`],
    },
    {
      def: {
        name: NAMES.natPostrouting,
        hook: { type: "nat", hook: "postrouting", priority: "srcnat" },
      },
      rules: [
        `ct status dnat ${family} saddr . ${family} daddr @${NAMES.hairpinEndpoints} jump ${NAMES.markForMasquerade}`,
        `jump ${NAMES.masquerading}`,
      ],
    },
    {
      def: { name: NAMES.services },
      rules: [`${family} daddr . meta l4proto . th dport vmap @${NAMES.serviceIPs}`],
    },
    { def: { name: NAMES.markForMasquerade }, rules: [`meta mark set meta mark | ${mark}`] },
    {
      def: { name: NAMES.masquerading },
      rules: [
        `meta mark & ${mark} == 0 return`,
        `meta mark set meta mark ^ ${mark}`,
        "masquerade fully-random",
      ],
    },
    {
      def: { name: NAMES.serviceEndpointsCheck },
      rules: [`${family} daddr . meta l4proto . th dport vmap @${NAMES.noEndpointServices}`],
    },
    { def: { name: NAMES.clusterIPsCheck }, rules: clusterIPRules },
    { def: { name: NAMES.rejectChain }, rules: ["reject"] },
  ];
  const serviceKey = `${addr} . inet_proto . inet_service`;
  const sets: SetDef[] = [
    { kind: "set", name: NAMES.clusterIPs, type: `type ${addr}`, comment: "Active ClusterIPs" },
    {
      kind: "map",
      name: NAMES.serviceIPs,
      type: `type ${serviceKey} : verdict`,
      comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic",
    },
    {
      kind: "map",
      name: NAMES.noEndpointServices,
      type: `type ${serviceKey} : verdict`,
      comment: "vmap to drop or reject packets to services with no endpoints",
    },
    {
      kind: "set",
      name: NAMES.hairpinEndpoints,
      type: `type ${addr} . ${addr}`,
      comment: "endpoint . endpoint: a pod reaching its own service and landing on itself",
    },
    {
      kind: "map",
      name: NAMES.serviceEndpoints,
      type:
        `typeof ${family} daddr . meta l4proto . th dport . numgen random mod 1 : ${family} daddr . tcp dport`,
      comment: "service address, protocol, port and endpoint index to endpoint",
    },
  ];
  return { chains, sets };
}

/**
 * Renders what one service port adds to a family's table, or null when the port has no
 * address in this family.
 */
export function renderServicePort(
  port: ServicePort,
  endpoints: readonly Endpoint[],
  options: NftRenderOptions,
): Fragment | null {
  const ipFamily = ipFamilyOf(options.family);
  const clusterIP = port.clusterIPs.find((ip) => familyOf(ip) === ipFamily);
  if (clusterIP === undefined) return null;
  const family = options.family;
  const proto = port.name.protocol.toLowerCase();
  const comment = serviceComment(port.name);
  const selection = selectEndpoints(
    port,
    endpoints.filter((ep) => familyOf(ep.ip) === ipFamily),
  );
  const targets = port.internalPolicyLocal ? selection.local : selection.cluster;
  const serviceKey = `${clusterIP} . ${proto} . ${port.port}`;
  const elements: ElementDef[] = [{ set: NAMES.clusterIPs, key: clusterIP, comment }];
  const chains = new Map<string, readonly string[]>();
  if (targets.length === 0) {
    const verdict = port.internalPolicyLocal && selection.cluster.length > 0
      ? "drop"
      : `goto ${NAMES.rejectChain}`;
    elements.push({ set: NAMES.noEndpointServices, key: serviceKey, value: verdict, comment });
    return { chains, elements };
  }
  const chain = serviceChainName("service", port.name);
  const rules: string[] = [];
  if (options.masqueradeAll) rules.push(`jump ${NAMES.markForMasquerade}`);
  else if (options.notLocalMatch) {
    rules.push(`${options.notLocalMatch} jump ${NAMES.markForMasquerade}`);
  }
  rules.push(
    `dnat ${family} to ${family} daddr . meta l4proto . th dport . numgen random mod ${targets.length} map @${NAMES.serviceEndpoints}`,
  );
  chains.set(chain, rules);
  elements.push({ set: NAMES.serviceIPs, key: serviceKey, value: `goto ${chain}`, comment });
  targets.forEach((ep, i) => {
    elements.push({
      set: NAMES.serviceEndpoints,
      key: `${serviceKey} . ${i}`,
      value: `${ep.ip} . ${ep.port}`,
      comment,
    });
    elements.push({ set: NAMES.hairpinEndpoints, key: `${ep.ip} . ${ep.ip}` });
  });
  return { chains, elements };
}
