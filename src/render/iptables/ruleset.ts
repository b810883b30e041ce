/**
 * The iptables rules of one family, upstream kube-proxy's classic layout: the fixed KUBE-*
 * chains and the rules each service port adds to them and to its own KUBE-SVC/SVL/EXT/FW/SEP
 * chains.
 *
 * Pure functions of state and options; every rule is one `-A CHAIN …` line of
 * `iptables-restore` input. How a packet is served (see README.md beside this file):
 * - nat `KUBE-SERVICES` matches `-d <ip> -p <proto> --dport <port>` of every cluster IP
 *   (→ `KUBE-SVC-`, or `KUBE-SVL-` for internalTrafficPolicy Local), external IP and
 *   load-balancer IP (→ `KUBE-EXT-`, or `KUBE-FW-` with loadBalancerSourceRanges); its last
 *   rules send the node-port addresses to `KUBE-NODEPORTS` (→ `KUBE-EXT-`).
 * - `KUBE-SVC-`/`KUBE-SVL-` pick an endpoint chain with a `statistic --mode random` cascade
 *   (after the `recent` checks of ClientIP affinity); `KUBE-SEP-` marks hairpin traffic for
 *   masquerading and DNATs.
 * - filter `KUBE-SERVICES`, `KUBE-EXTERNAL-SERVICES` and `KUBE-PROXY-FIREWALL` reject or drop
 *   what was not DNATed: services without (local) endpoints, firewalled LB traffic, and
 *   (`KUBE-CLUSTER-IPS`) cluster IPs on unused ports and unallocated service IPs.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import { type Endpoint, formatEndpoint } from "../../model/endpoint.ts";
import { cidrContains } from "../../model/ip.ts";
import {
  familyOf,
  formatServicePortName,
  serviceKey,
  type ServicePort,
} from "../../model/service_port.ts";
import { selectEndpoints } from "../endpoints.ts";
import {
  comment,
  endpointChainName,
  FILTER,
  FIXED_CHAINS,
  NAT,
  serviceChainNames,
  type Table,
} from "./names.ts";
import type { IptablesRenderOptions } from "./options.ts";

/** One rule a service port adds to a fixed chain. */
export interface SharedRule {
  readonly table: Table;
  readonly chain: string;
  /** The whole `-A CHAIN …` line. */
  readonly rule: string;
}

/** What one service port adds to a family's tables. */
export interface Fragment {
  /** Rules in fixed chains (KUBE-SERVICES, KUBE-NODEPORTS, filter chains), in order. */
  readonly shared: readonly SharedRule[];
  /** Its own nat chains (KUBE-SVC/SVL/EXT/FW/SEP-…) and their rules. */
  readonly chains: ReadonlyMap<string, readonly string[]>;
  /** Its cluster IP in this family (for KUBE-CLUSTER-IPS). */
  readonly clusterIP: string;
  /** `namespace/name` of its Service (KUBE-CLUSTER-IPS comment). */
  readonly service: string;
}

/** The fixed chains of both tables with all their rules. */
export type FixedChains = Record<Table, Map<string, string[]>>;

/**
 * The fixed chains' rules: their own rules, then every fragment's shared rules in the given
 * order, then the tails (node-port dispatch in nat KUBE-SERVICES; the cluster-IP check in
 * filter KUBE-SERVICES).
 */
export function renderFixedChains(
  fragments: Iterable<Pick<Fragment, "shared" | "clusterIP" | "service">>,
  options: IptablesRenderOptions,
): FixedChains {
  const tables: FixedChains = { filter: new Map(), nat: new Map() };
  for (const table of ["filter", "nat"] as const) {
    for (const chain of FIXED_CHAINS[table]) tables[table].set(chain, []);
  }
  const mark = options.masqueradeMark;
  tables.nat.get(NAT.postrouting)!.push(
    `-A ${NAT.postrouting} -m mark ! --mark ${mark}/${mark} -j RETURN`,
    `-A ${NAT.postrouting} -j MARK --xor-mark ${mark}`,
    `-A ${NAT.postrouting} ${comment("kubernetes service traffic requiring SNAT")} ` +
      `-j MASQUERADE${options.randomFully ? " --random-fully" : ""}`,
  );
  tables.nat.get(NAT.markMasq)!.push(`-A ${NAT.markMasq} -j MARK --or-mark ${mark}`);
  const forward = tables.filter.get(FILTER.forward)!;
  if (options.dropInvalid) {
    forward.push(`-A ${FILTER.forward} -m conntrack --ctstate INVALID -j DROP`);
  }
  forward.push(
    `-A ${FILTER.forward} ${
      comment("kubernetes forwarding rules")
    } -m mark --mark ${mark}/${mark} -j ACCEPT`,
    `-A ${FILTER.forward} ${
      comment("kubernetes forwarding conntrack rule")
    } -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  );

  const clusterIPs = new Map<string, string>();
  for (const fragment of fragments) {
    for (const { table, chain, rule } of fragment.shared) tables[table].get(chain)!.push(rule);
    if (!clusterIPs.has(fragment.clusterIP)) clusterIPs.set(fragment.clusterIP, fragment.service);
  }

  const natServices = tables.nat.get(NAT.services)!;
  const nodePortsComment = comment(
    "kubernetes service nodeports; NOTE: this must be the last rule in this chain",
  );
  if (options.nodePortsOnAllAddresses) {
    // Upstream's rule when nodePortAddresses match everything: every local address but loopback.
    natServices.push(
      `-A ${NAT.services} ${nodePortsComment} -m addrtype --dst-type LOCAL ! -d ${
        options.family === "IPv4" ? "127.0.0.0/8" : "::1/128"
      } -j ${NAT.nodePorts}`,
    );
  }
  for (const ip of options.nodePortsOnAllAddresses ? [] : options.nodePortIPs) {
    natServices.push(`-A ${NAT.services} ${nodePortsComment} -d ${ip} -j ${NAT.nodePorts}`);
  }

  const check = tables.filter.get(FILTER.clusterIPs)!;
  for (const [ip, service] of clusterIPs) {
    check.push(`-A ${FILTER.clusterIPs} ${comment(`${service} cluster IP`)} -d ${ip} -j REJECT`);
  }
  for (const cidr of options.serviceCIDRs) {
    check.push(
      `-A ${FILTER.clusterIPs} ${comment("unallocated service IP")} -d ${cidr} -j DROP`,
    );
  }
  if (check.length > 0) {
    // Only traffic to a service CIDR pays for the per-IP rules, unless a cluster IP lies
    // outside every service CIDR (or none is known): then everything not DNATed does.
    const cidrs = options.serviceCIDRs;
    const parsed = cidrs.map((c) => ipaddr.parseCIDR(c));
    const inside = cidrs.length > 0 && [...clusterIPs.keys()].every((ip) => {
      const address = ipaddr.parse(ip);
      return parsed.some(([net, bits]) =>
        address.kind() === net.kind() && address.match(net, bits)
      );
    });
    const why = comment("cluster IPs on unused ports, unallocated service IPs");
    const filterServices = tables.filter.get(FILTER.services)!;
    for (const target of inside ? cidrs.map((c) => `-d ${c} `) : [""]) {
      filterServices.push(`-A ${FILTER.services} ${why} ${target}-j ${FILTER.clusterIPs}`);
    }
  }
  return tables;
}

/**
 * Renders what one service port adds to a family's tables, or null when the port has no
 * cluster IP in this family.
 */
export function renderServicePort(
  port: ServicePort,
  endpoints: readonly Endpoint[],
  options: IptablesRenderOptions,
): Fragment | null {
  const family = options.family;
  const inFamily = (ips: readonly string[]) => ips.filter((ip) => familyOf(ip) === family);
  const [clusterIP] = inFamily(port.clusterIPs);
  if (clusterIP === undefined) return null;
  const r = new FragmentBuilder(port, options);
  const sel = selectEndpoints(port, endpoints.filter((ep) => familyOf(ep.ip) === family), {
    nodeName: options.nodeName,
    zone: options.zone,
  });
  const name = r.name;
  const chains = serviceChainNames(port.name);
  const externalIPs = inFamily(port.externalIPs);
  const lbIPs = inFamily(port.loadBalancerIPs);
  const servesNodePort = port.nodePort !== 0 &&
    (options.nodePortsOnAllAddresses || options.nodePortIPs.length > 0);
  const externallyAccessible = externalIPs.length + lbIPs.length > 0 || servesNodePort;
  const iTPLocal = port.internalPolicyLocal;
  const eTPLocal = port.externalPolicyLocal;

  // Which chains exist, as upstream decides it (CategorizeEndpoints and syncProxyRules).
  const hasEndpoints = sel.any;
  const usesCluster = sel.cluster.length > 0 && (!iTPLocal || externallyAccessible);
  const usesLocal = sel.local.length > 0 && (iTPLocal || (eTPLocal && externallyAccessible));
  const internalChain = iTPLocal ? chains.local : chains.cluster;
  const hasInternal = iTPLocal ? sel.local.length > 0 : sel.cluster.length > 0;
  const externalPolicyChain = eTPLocal ? chains.local : chains.cluster;
  const hasExternal = eTPLocal ? sel.local.length > 0 : sel.cluster.length > 0;
  const usesExternal = hasEndpoints && externallyAccessible;
  const ranges = port.loadBalancerSourceRanges.filter((c) => familyOf(c.split("/")[0]) === family);
  // Each family's ranges guard its LB IPs; a family without ranges stays open (upstream).
  const usesFirewall = hasEndpoints && lbIPs.length > 0 && ranges.length > 0;
  const loadBalancerChain = usesFirewall ? chains.firewall : chains.external;

  const internalFilter = !hasEndpoints
    ? { target: "REJECT", why: `${name} has no endpoints` }
    : { target: "DROP", why: `${name} has no local endpoints` };
  const externalFilter = internalFilter;
  const match = (ip: string, dport: number) => `${r.proto} -d ${ip} --dport ${dport}`;

  // The cluster IP.
  if (hasInternal) {
    r.shared(
      "nat",
      NAT.services,
      `${comment(`${name} cluster IP`)} ${match(clusterIP, port.port)} -j ${internalChain}`,
    );
  } else {
    r.shared(
      "filter",
      FILTER.services,
      `${comment(internalFilter.why)} ${match(clusterIP, port.port)} -j ${internalFilter.target}`,
    );
  }

  // External IPs and load-balancer IPs.
  for (const ip of externalIPs) {
    if (hasEndpoints) {
      r.shared(
        "nat",
        NAT.services,
        `${comment(`${name} external IP`)} ${match(ip, port.port)} -j ${chains.external}`,
      );
    }
    if (!hasExternal) {
      r.shared(
        "filter",
        FILTER.externalServices,
        `${comment(externalFilter.why)} ${match(ip, port.port)} -j ${externalFilter.target}`,
      );
    }
  }
  for (const ip of lbIPs) {
    if (hasEndpoints) {
      r.shared(
        "nat",
        NAT.services,
        `${comment(`${name} loadbalancer IP`)} ${match(ip, port.port)} -j ${loadBalancerChain}`,
      );
    }
    if (usesFirewall) {
      r.shared(
        "filter",
        FILTER.proxyFirewall,
        `${comment(`${name} traffic not accepted by ${chains.firewall}`)} ${
          match(ip, port.port)
        } -j DROP`,
      );
    }
  }
  if (!hasExternal) {
    for (const ip of lbIPs) {
      r.shared(
        "filter",
        FILTER.externalServices,
        `${comment(externalFilter.why)} ${match(ip, port.port)} -j ${externalFilter.target}`,
      );
    }
  }

  // Node ports (never limited by loadBalancerSourceRanges, as upstream).
  if (servesNodePort) {
    if (hasEndpoints) {
      r.shared(
        "nat",
        NAT.nodePorts,
        `${comment(name)} ${r.proto} --dport ${port.nodePort} -j ${chains.external}`,
      );
    }
    if (!hasExternal && options.nodePortsOnAllAddresses) {
      r.shared(
        "filter",
        FILTER.externalServices,
        `${
          comment(externalFilter.why)
        } -m addrtype --dst-type LOCAL ${r.proto} --dport ${port.nodePort} -j ${externalFilter.target}`,
      );
    }
    if (!hasExternal && !options.nodePortsOnAllAddresses) {
      for (const ip of options.nodePortIPs) {
        r.shared(
          "filter",
          FILTER.externalServices,
          `${comment(externalFilter.why)} ${match(ip, port.nodePort)} -j ${externalFilter.target}`,
        );
      }
    }
  }
  if (port.healthCheckNodePort !== 0) {
    r.shared(
      "filter",
      FILTER.nodePorts,
      `${
        comment(`${name} health check node port`)
      } -m tcp -p tcp --dport ${port.healthCheckNodePort} -j ACCEPT`,
    );
  }

  // Masquerading of traffic to the cluster IP (in the internal policy chain, as upstream).
  if (hasInternal) {
    const clusterMatch = `${comment(`${name} cluster IP`)} ${match(clusterIP, port.port)}`;
    if (options.masqueradeAll) {
      r.rule(internalChain, `${clusterMatch} -j ${NAT.markMasq}`);
    } else if (options.notLocalMatch !== null) {
      r.rule(internalChain, `${clusterMatch} ${options.notLocalMatch} -j ${NAT.markMasq}`);
    }
  }

  // The external chain.
  if (usesExternal) {
    const ext = chains.external;
    r.chain(ext);
    if (!eTPLocal) {
      r.rule(
        ext,
        `${comment(`masquerade traffic for ${name} external destinations`)} -j ${NAT.markMasq}`,
      );
    } else {
      if (options.localMatch !== null && usesCluster) {
        r.rule(
          ext,
          `${
            comment(`pod traffic for ${name} external destinations`)
          } ${options.localMatch} -j ${chains.cluster}`,
        );
      }
      if (usesCluster) {
        r.rule(
          ext,
          `${
            comment(`masquerade LOCAL traffic for ${name} external destinations`)
          } -m addrtype --src-type LOCAL -j ${NAT.markMasq}`,
        );
        r.rule(
          ext,
          `${
            comment(`route LOCAL traffic for ${name} external destinations`)
          } -m addrtype --src-type LOCAL -j ${chains.cluster}`,
        );
      }
    }
    if (hasExternal) r.rule(ext, `-j ${externalPolicyChain}`);
  }

  // The firewall chain (loadBalancerSourceRanges).
  if (usesFirewall) {
    const fw = chains.firewall;
    r.chain(fw);
    const lbComment = comment(`${name} loadbalancer IP`);
    for (const cidr of ranges) r.rule(fw, `${lbComment} -s ${cidr} -j ${chains.external}`);
    // A VIP-like load balancer whose IP is local to the node: the node's own requests come
    // from the LB IP. Allowed when the node is inside a range (upstream's rule).
    const nodeInRange = options.nodeIPs.some((ip) => ranges.some((c) => cidrContains(c, ip)));
    if (nodeInRange) {
      for (const ip of lbIPs) r.rule(fw, `${lbComment} -s ${ip} -j ${chains.external}`);
    }
    r.rule(fw, comment(`other traffic to ${name} will be dropped by KUBE-PROXY-FIREWALL`));
  }

  // Policy chains and the endpoint chains they use.
  if (usesCluster) r.balancer(chains.cluster, sel.cluster);
  if (usesLocal) r.balancer(chains.local, sel.local);
  return r.build(clusterIP);
}

/** Accumulates one service port's rules. */
class FragmentBuilder {
  readonly name: string;
  /** `-m tcp -p tcp` (upstream's order). */
  readonly proto: string;
  readonly #port: ServicePort;
  readonly #options: IptablesRenderOptions;
  readonly #shared: SharedRule[] = [];
  readonly #chains = new Map<string, string[]>();

  constructor(port: ServicePort, options: IptablesRenderOptions) {
    this.#port = port;
    this.#options = options;
    this.name = formatServicePortName(port.name);
    const p = port.name.protocol.toLowerCase();
    this.proto = `-m ${p} -p ${p}`;
  }

  shared(table: Table, chain: string, body: string): void {
    this.#shared.push({ table, chain, rule: `-A ${chain} ${body}` });
  }

  chain(name: string): string[] {
    let rules = this.#chains.get(name);
    if (rules === undefined) this.#chains.set(name, rules = []);
    return rules;
  }

  rule(chain: string, body: string): void {
    this.chain(chain).push(`-A ${chain} ${body}`);
  }

  /** A policy chain: ClientIP affinity checks, then the probability cascade to endpoint chains. */
  balancer(chain: string, endpoints: readonly Endpoint[]): void {
    this.chain(chain);
    const affinity = this.#port.sessionAffinity;
    const described = endpoints.map((ep) => {
      const id = formatEndpoint(ep);
      return {
        ep,
        id,
        sep: this.endpointChain(ep, id),
        why: this.#comment(`${this.name} -> ${id}`),
      };
    });
    if (affinity !== null) {
      for (const { sep, why } of described) {
        this.rule(
          chain,
          `${why}-m recent --name ${sep} --rcheck --seconds ${affinity.timeoutSeconds} --reap -j ${sep}`,
        );
      }
    }
    described.forEach(({ sep, why }, i) => {
      const left = endpoints.length - i;
      const pick = left > 1 ? `-m statistic --mode random --probability ${probability(left)} ` : "";
      this.rule(chain, `${why}${pick}-j ${sep}`);
    });
  }

  /** Adds (once) the KUBE-SEP- chain of an endpoint and returns its name. */
  endpointChain(ep: Endpoint, id: string): string {
    const name = endpointChainName(this.#port.name, id);
    if (this.#chains.has(name)) return name;
    const why = this.#comment(this.name);
    this.rule(name, `${why}-s ${ep.ip} -j ${NAT.markMasq}`);
    const recent = this.#port.sessionAffinity === null ? "" : `-m recent --name ${name} --set `;
    this.rule(name, `${why}${recent}${this.proto} -j DNAT --to-destination ${id}`);
    return name;
  }

  /** A comment followed by a space, or nothing in large-cluster mode (upstream's economy). */
  #comment(text: string): string {
    return this.#options.largeClusterMode ? "" : `${comment(text)} `;
  }

  build(clusterIP: string): Fragment {
    return {
      shared: this.#shared,
      chains: this.#chains,
      clusterIP,
      service: serviceKey(this.#port.name),
    };
  }
}

const probabilities: string[] = [];

/**
 * `1/n` with ten decimals exactly as upstream prints it (Go's `%0.10f`: the exact binary value
 * rounded half to even), e.g. `0.3333333333`; cached like upstream's precomputed table.
 */
export function probability(n: number): string {
  return probabilities[n] ??= formatTenDecimals(1 / n);
}

function formatTenDecimals(x: number): string {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const exponent = (hi >>> 20) & 0x7ff;
  let mantissa = (BigInt(hi & 0xfffff) << 32n) | BigInt(view.getUint32(4));
  if (exponent !== 0) mantissa |= 1n << 52n;
  const shift = 1075 - Math.max(exponent, 1); // x = mantissa / 2^shift
  const scaled = mantissa * 10n ** 10n;
  const denominator = 1n << BigInt(shift);
  let q = scaled / denominator;
  const twice = 2n * (scaled % denominator);
  if (twice > denominator || (twice === denominator && q % 2n === 1n)) q += 1n;
  const digits = q.toString().padStart(11, "0");
  return `${digits.slice(0, -10)}.${digits.slice(-10)}`;
}
