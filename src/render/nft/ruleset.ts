/**
 * The nft ruleset of one family: the fixed skeleton (base chains, dispatch chains, sets and
 * maps) and the fragment each service port adds to it (its chains and its elements).
 *
 * Pure functions of state and options. Per-service state lives in elements of a fixed set of
 * maps and in plain rules; the few rules that look up a named map (`lb-N` balancers, affinity)
 * are shared by every service with the same shape, because the kernel's cost of binding a map
 * to a rule grows with the number of such rules (a rule per service referencing one map took 30 s
 * at 10k services here; a shared rule took 2 s).
 *
 * How a packet is served (see nft/README.md for the picture):
 * - `services` looks up `daddr . l4proto . dport` in `service-ips` (cluster, external and
 *   load-balancer IPs) or `l4proto . dport` in `service-nodeports` (node IPs in `nodeport-ips`).
 * - Cluster IPs go straight to a shared balancer chain (`lb-N`, or `local-lb-N` for
 *   internalTrafficPolicy Local); external entries go through the service's `external-…`
 *   chain, which masquerades (eTP Cluster) or short-circuits pods and the node to all endpoints
 *   and sends the rest to this node's endpoints (eTP Local).
 * - A balancer DNATs with `daddr . l4proto . dport . numgen random mod N` as the key into
 *   `cluster-endpoints` or `local-endpoints`: each entry point (cluster IP, external IP, LB IP,
 *   node IP + node port) has its own N elements there.
 *
 * @module
 */
import type { Endpoint } from "../../model/endpoint.ts";
import { type IPFamily, type ServicePort } from "../../model/service_port.ts";
import { cidrContains } from "../../model/ip.ts";
import { selectEndpoints } from "../endpoints.ts";
import {
  affinityChainName,
  balancerChainName,
  type BalancerSpec,
  endpointMapName,
  NAMES,
  type NftProtocol,
  safeComment,
  serviceChainName,
  serviceComment,
} from "./names.ts";
import { formatEndpoint } from "../../model/endpoint.ts";
import type { ChainDef, ElementDef, NftFamily, SetDef } from "./transaction.ts";

/** How a family's ruleset is rendered. */
export interface NftRenderOptions {
  /** Table name (same in both families). */
  readonly table: string;
  readonly family: NftFamily;
  /** Bit of the packet mark that requests masquerading (0-31). */
  readonly masqueradeBit: number;
  /** Masquerade all traffic to cluster IPs. */
  readonly masqueradeAll: boolean;
  /** nft match for "comes from a local pod" (e.g. `ip saddr 10.244.0.0/16`), or null. */
  readonly localMatch: string | null;
  /** nft match for "does NOT come from a local pod", or null when there is no detector. */
  readonly notLocalMatch: string | null;
  /** Service CIDRs of this family: unallocated IPs inside them are dropped. */
  readonly serviceCIDRs: readonly string[];
  /** Addresses of this node (this family) that accept node ports. */
  readonly nodePortIPs: readonly string[];
  /** This node's name, for local endpoints and node topology hints. */
  readonly nodeName: string;
  /** This node's zone, for zone topology hints (empty when unknown). */
  readonly zone: string;
}

/** A chain with its rules. */
export interface ChainWithRules {
  readonly def: ChainDef;
  readonly rules: readonly string[];
}

/** The fixed part of a table; it changes only with the options (so only in full syncs). */
export interface Skeleton {
  readonly chains: readonly ChainWithRules[];
  readonly sets: readonly SetDef[];
  /** Elements that depend on the node, not on services (the node-port addresses). */
  readonly elements: readonly ElementDef[];
}

/**
 * A service port's elements of one set, already formatted as a script writes them
 * (`key comment "…" : value`), so a render allocates no object per element. `keys[i]` is the
 * key of `lines[i]`; a key occurs at most once per fragment (a repeated key takes the later
 * line, in the first place).
 */
export interface KeyedElements {
  readonly set: string;
  readonly entry?: undefined;
  readonly keys: readonly string[];
  readonly lines: readonly string[];
}

/**
 * A service port's elements of one entry point (`addr . proto . port`) in an endpoint map, as
 * one text: `count` formatted elements joined by `, ` (as an `add element` command lists them),
 * element `i` having the key `<entry> . <i>`. The text may be written out only when read.
 */
export interface EntryElements {
  readonly set: string;
  readonly entry: string;
  readonly count: number;
  readonly text: string;
}

/**
 * An entry point's elements that keep their endpoints (the state's own objects) rather than
 * their text, and write the text each time it is read: what the planner remembers of a
 * 100k-endpoint table is then ~a pointer per endpoint instead of ~70 bytes of text, and a full
 * render leaves no per-entry text behind for the garbage collector to move.
 */
class EndpointElements implements EntryElements {
  readonly set: string;
  readonly entry: string;
  readonly #endpoints: readonly Endpoint[];
  /** ` comment "…"` or empty. */
  readonly #comment: string;

  constructor(set: string, entry: string, endpoints: readonly Endpoint[], comment: string) {
    this.set = set;
    this.entry = entry;
    this.#endpoints = endpoints;
    this.#comment = comment;
  }

  get count(): number {
    return this.#endpoints.length;
  }

  get text(): string {
    const endpoints = this.#endpoints;
    const elements = new Array<string>(endpoints.length);
    for (let i = 0; i < endpoints.length; i++) {
      const ep = endpoints[i];
      elements[i] = `${this.entry} . ${i}${this.#comment} : ${ep.ip} . ${ep.port}`;
    }
    return elements.join(ELEMENT_SEPARATOR);
  }
}

/** A service port's elements of one set, or of one entry point in an endpoint map. */
export type ElementGroup = KeyedElements | EntryElements;

/** Separates formatted elements in {@link EntryElements.text} (never inside an element). */
export const ELEMENT_SEPARATOR = ", ";

/**
 * What one service port adds: chains (name → rules) and elements. Chains and elements may be
 * shared with other service ports (balancers, hairpin entries); the syncer counts owners.
 */
export interface Fragment {
  readonly chains: ReadonlyMap<string, readonly string[]>;
  /** Element groups in the order of their first element. */
  readonly elements: readonly ElementGroup[];
  /** Per-service sets (only IPv6 ClientIP affinity has them). */
  readonly sets?: ReadonlyMap<string, SetDef>;
}

/** The IP family an nft family programs. */
export function ipFamilyOf(family: NftFamily): IPFamily {
  return family === "ip" ? "IPv4" : "IPv6";
}

/** Largest number of ClientIP affinity entries per family. */
export const AFFINITY_MAP_SIZE = 262144;

const PROTOCOLS: readonly NftProtocol[] = ["tcp", "udp", "sctp"];

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
  const clusterIPRules = [`${f} daddr @${NAMES.clusterIPs} reject`];
  for (const cidr of options.serviceCIDRs) clusterIPRules.push(`${f} daddr ${cidr} drop`);
  const affinityRecords = f === "ip6"
    ? []
    : PROTOCOLS.map((p) =>
      `meta l4proto ${p} ct status dnat ct original ${f} daddr . meta l4proto . ct original proto-dst vmap @${NAMES.affinityServices}`
    );

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
    filter(NAMES.filterOutputPostDnat, "output", -90, [newConn(NAMES.clusterIPsCheck)]),
    nat(NAMES.natPrerouting, "prerouting", "dstnat", [`jump ${NAMES.services}`]),
    nat(NAMES.natOutput, "output", -100, [`jump ${NAMES.services}`]),
    nat(NAMES.natPostrouting, "postrouting", "srcnat", [
      ...affinityRecords,
      `ct status dnat ${f} saddr . ${f} daddr @${NAMES.hairpinEndpoints} jump ${NAMES.markForMasquerade}`,
      `jump ${NAMES.masquerading}`,
    ]),
    plain(NAMES.services, [
      ...masqueradeClusterIPs,
      `${key3} vmap @${NAMES.serviceIPs}`,
      `${f} daddr @${NAMES.nodeportIPs} meta l4proto . th dport vmap @${NAMES.serviceNodeports}`,
    ]),
    plain(NAMES.markForMasquerade, [`meta mark set meta mark | ${mark}`]),
    plain(NAMES.masquerading, [
      `meta mark & ${mark} == 0 return`,
      `meta mark set meta mark ^ ${mark}`,
      "masquerade fully-random",
    ]),
    plain(NAMES.serviceEndpointsCheck, [`${key3} vmap @${NAMES.noEndpointServices}`]),
    plain(NAMES.nodeportEndpointsCheck, [
      `${f} daddr @${NAMES.nodeportIPs} meta l4proto . th dport vmap @${NAMES.noEndpointNodeports}`,
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
  const endpointMaps = [false, true].flatMap((local) =>
    PROTOCOLS.map((p): SetDef => ({
      kind: "map",
      name: endpointMapName(local, p),
      type: `typeof ${key3} . numgen random mod 1 : ${f} daddr . ${p} dport`,
      comment: `entry point and index to ${local ? "this node's" : "all"} ${p} endpoints`,
    }))
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
      type: `type ${addr} . ${serviceKey} : ${addr} . inet_service`,
      flags: ["dynamic", "timeout"],
      size: AFFINITY_MAP_SIZE,
      dynamic: true,
      comment: "ClientIP affinity: client . entry point to the endpoint it sticks to",
    }, {
      kind: "map" as const,
      name: NAMES.affinityServices,
      type: `type ${serviceKey} : verdict`,
      comment: "ClientIP affinity services: entry point to the chain recording affinity",
    }]),
  ];
  const elements = options.nodePortIPs.map((ip): ElementDef => ({
    set: NAMES.nodeportIPs,
    key: ip,
    comment: "node address",
  }));
  return { chains, sets, elements };
}

/** One way into a service port: the address (or node IP) and port the client used. */
interface Entry {
  readonly address: string;
  readonly port: number;
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
  const v6 = options.family === "ip6";
  const inFamily = (ips: readonly string[]) => ofFamily(ips, v6);
  const clusterIP = port.clusterIPs.find((ip) => ip.includes(":") === v6);
  if (clusterIP === undefined) return null;
  const r = new FragmentBuilder(port, options);
  const selection = selectEndpoints(port, ofFamily(endpoints, v6), options);
  const internal = port.internalPolicyLocal ? selection.local : selection.cluster;
  const sticky = port.sessionAffinity !== null;

  // The cluster IP: internal traffic policy.
  const clusterEntry: Entry = { address: clusterIP, port: port.port };
  r.element(NAMES.clusterIPs, clusterIP);
  if (internal.length > 0) {
    const target = r.balancer(internal, { local: port.internalPolicyLocal, sticky });
    r.element(NAMES.serviceIPs, r.serviceKey(clusterEntry), `goto ${target}`);
    r.endpoints(clusterEntry, internal, port.internalPolicyLocal);
  } else {
    r.element(
      NAMES.noEndpointServices,
      r.serviceKey(clusterEntry),
      selection.any ? "drop" : `goto ${NAMES.rejectChain}`,
    );
  }

  // External IPs, load-balancer IPs and node ports: external traffic policy.
  const addressEntries = [...inFamily(port.externalIPs), ...inFamily(port.loadBalancerIPs)]
    .map((address): Entry => ({ address, port: port.port }));
  const nodePortEntries = port.nodePort === 0
    ? []
    : options.nodePortIPs.map((address): Entry => ({ address, port: port.nodePort }));
  if (addressEntries.length + nodePortEntries.length > 0) {
    const nodePortKey = `${r.proto} . ${port.nodePort}`;
    if (!selection.any) {
      for (const e of addressEntries) {
        r.element(NAMES.noEndpointServices, r.serviceKey(e), `goto ${NAMES.rejectChain}`);
      }
      if (nodePortEntries.length > 0) {
        r.element(NAMES.noEndpointNodeports, nodePortKey, `goto ${NAMES.rejectChain}`);
      }
    } else {
      const external = r.externalChain(selection.cluster, selection.local);
      for (const e of addressEntries) {
        r.element(NAMES.serviceIPs, r.serviceKey(e), `goto ${external}`);
      }
      if (nodePortEntries.length > 0) {
        r.element(NAMES.serviceNodeports, nodePortKey, `goto ${external}`);
      }
      for (const e of [...addressEntries, ...nodePortEntries]) {
        // eTP Local short-circuits pods and the node to all endpoints, so both maps are used.
        if (!port.externalPolicyLocal || selection.cluster.length > 0) {
          r.endpoints(e, selection.cluster, false);
        }
        if (port.externalPolicyLocal) r.endpoints(e, selection.local, true);
      }
    }
  }

  // loadBalancerSourceRanges guard the load-balancer IPs only.
  if (port.loadBalancerSourceRanges.length > 0) {
    const ranges = outermost(inFamily(port.loadBalancerSourceRanges));
    const nodeInRange = options.nodePortIPs.some((ip) => ranges.some((c) => cidrContains(c, ip)));
    for (const lbIP of inFamily(port.loadBalancerIPs)) {
      const key = r.serviceKey({ address: lbIP, port: port.port });
      r.element(NAMES.firewallIPs, key);
      for (const range of ranges) r.element(NAMES.firewallAllow, `${key} . ${range}`);
      // Upstream: when the node is inside a range, traffic the node routes with the LB IP as
      // its source (LB IP assigned locally) is allowed too — unless a range holds it already
      // (nft refuses an interval inside another one of the same set).
      if (nodeInRange && !ranges.some((c) => cidrContains(c, lbIP))) {
        r.element(NAMES.firewallAllow, `${key} . ${lbIP}`);
      }
    }
  }
  return r.build();
}

/**
 * The addresses (or CIDRs, or endpoints) of one family: IPv6 ones hold a colon. The list
 * itself when all are (the common case: no copy).
 */
function ofFamily<T extends string | { readonly ip: string }>(
  items: readonly T[],
  v6: boolean,
): readonly T[] {
  const isV6 = (item: T) =>
    (typeof item === "string" ? item : (item as { ip: string }).ip).includes(":");
  for (let i = 0; i < items.length; i++) {
    if (isV6(items[i]) !== v6) return items.filter((item) => isV6(item) === v6);
  }
  return items;
}

/**
 * The ranges not inside another one of the list: nft refuses overlapping intervals in one
 * set, and a range inside another allows nothing more.
 */
function outermost(cidrs: readonly string[]): string[] {
  const byWidth = [...new Set(cidrs)]
    .sort((a, b) => Number(a.split("/")[1]) - Number(b.split("/")[1]));
  const kept: string[] = [];
  for (const cidr of byWidth) {
    if (!kept.some((outer) => cidrContains(outer, cidr.split("/")[0]))) kept.push(cidr);
  }
  return kept;
}

/** A set's group being filled. */
interface OpenGroup {
  readonly set: string;
  readonly entry?: undefined;
  readonly keys: string[];
  /** The same array as `keys` while every line is its key (hairpin entries). */
  lines: string[];
}

/** Accumulates one service port's chains and elements. */
class FragmentBuilder {
  readonly chains = new Map<string, readonly string[]>();
  readonly elements: (OpenGroup | EntryElements)[] = [];
  #sets: Map<string, SetDef> | undefined;
  readonly proto: NftProtocol;
  readonly #port: ServicePort;
  readonly #options: NftRenderOptions;
  readonly #comment: string;
  #lastEntry: Entry | undefined;
  #lastKey = "";
  /** `comment "…"` as an element carries it (with its leading space), or nothing. */
  readonly #commentText: string;

  constructor(port: ServicePort, options: NftRenderOptions) {
    this.#port = port;
    this.#options = options;
    this.proto = port.name.protocol.toLowerCase() as NftProtocol;
    this.#comment = serviceComment(port.name);
    this.#commentText = this.#comment ? ` comment "${this.#comment}"` : "";
  }

  serviceKey(entry: Entry): string {
    // One string per entry point (keys are kept), and flat: joined, not a tree of pieces.
    if (entry !== this.#lastEntry) {
      this.#lastEntry = entry;
      this.#lastKey = [entry.address, this.proto, entry.port].join(" . ");
    }
    return this.#lastKey;
  }

  element(set: string, key: string, value?: string): void {
    const line = value === undefined
      ? [key, this.#commentText].join("")
      : [key, this.#commentText, " : ", value].join("");
    this.#keyed(set, key, line);
  }

  /** Adds a line to the set's group; a key already there takes the new line in its place. */
  #keyed(set: string, key: string, line: string): void {
    let group: OpenGroup | undefined;
    for (const g of this.elements) {
      if (g.set === set && g.entry === undefined) {
        group = g;
        break;
      }
    }
    if (group === undefined) {
      // Without a comment or value the line is the key: one array serves as both.
      const keys = [key];
      this.elements.push({ set, keys, lines: line === key ? keys : [line] });
      return;
    }
    if (group.keys === group.lines && line !== key) group.lines = [...group.keys];
    const at = group.keys.indexOf(key);
    if (at >= 0) group.lines[at] = line;
    else if (group.keys === group.lines) group.keys.push(key);
    else {
      group.keys.push(key);
      group.lines.push(line);
    }
  }

  /** The endpoints of one entry point in the cluster or local map, plus hairpin entries. */
  endpoints(entry: Entry, endpoints: readonly Endpoint[], local: boolean): void {
    const map = endpointMapName(local, this.proto);
    const key = this.serviceKey(entry);
    if (endpoints.length > 0) {
      this.#entryElements(new EndpointElements(map, key, endpoints, this.#commentText));
      for (const ep of endpoints) {
        // Only a local endpoint can be a hairpin: a pod's service traffic is DNATed on its own
        // node. (A set entry per endpoint cluster-wide cost ~0.8 s of a 10k-service cold start.)
        if (ep.isLocal) {
          const pair = [ep.ip, ep.ip].join(" . ");
          this.#keyed(NAMES.hairpinEndpoints, pair, pair);
        }
      }
    }
    const affinity = this.#port.sessionAffinity;
    if (affinity !== null && this.#options.family === "ip") {
      const recorder = affinityChainName(affinity.timeoutSeconds);
      this.chains.set(recorder, affinityRecorderRules(affinity.timeoutSeconds));
      this.element(NAMES.affinityServices, key, `jump ${recorder}`);
    }
  }

  /**
   * The balancer chain for these endpoints; adds it (and what it uses) to the fragment.
   * Without affinity it is a shared `lb-…` chain; with affinity in IPv4 a shared `sticky-lb-…`
   * chain that first looks the client up in the `affinity` map.
   */
  balancer(endpoints: readonly Endpoint[], how: { local: boolean; sticky: boolean }): string {
    const spec: BalancerSpec = { protocol: this.proto, count: endpoints.length, ...how };
    const f = this.#options.family;
    if (spec.sticky && f === "ip6") return this.#stickyIPv6(endpoints, spec.local);
    const plainName = balancerChainName({ ...spec, sticky: false });
    const map = endpointMapName(spec.local, spec.protocol);
    this.chains.set(plainName, [
      `dnat ${f} to ${f} daddr . meta l4proto . th dport . numgen random mod ${spec.count} map @${map}`,
    ]);
    if (!spec.sticky) return plainName;
    const name = balancerChainName(spec);
    this.chains.set(name, [
      `dnat ${f} to ${f} saddr . ${f} daddr . meta l4proto . th dport map @${NAMES.affinity}`,
      `goto ${plainName}`,
    ]);
    return name;
  }

  /**
   * IPv6 ClientIP affinity, upstream's way: a dynamic set of clients per endpoint, filled by
   * the endpoint's chain and checked first by the service's sticky chain. nft 1.0.6 cannot
   * write a map entry larger than 16 bytes from the packet path (`update` with an IPv6 key
   * and an `address . port` value fails an assertion in nft), so the shared map of IPv4 is not
   * possible here. These objects exist only for IPv6 services with ClientIP affinity.
   */
  #stickyIPv6(endpoints: readonly Endpoint[], local: boolean): string {
    const spn = this.#port.name;
    const timeout = this.#port.sessionAffinity!.timeoutSeconds;
    const name = serviceChainName(local ? "sticky-local" : "sticky", spn);
    const checks = endpoints.map((ep) => {
      const id = formatEndpoint(ep);
      const set = serviceChainName("affinity", spn, id);
      const chain = serviceChainName("endpoint", spn, id);
      (this.#sets ??= new Map()).set(set, {
        kind: "set",
        name: set,
        type: "type ipv6_addr",
        flags: ["dynamic", "timeout"],
        timeoutSeconds: timeout,
        dynamic: true,
        comment: safeComment(`${this.#comment} clients sticking to ${id}`),
      });
      this.chains.set(chain, [
        `update @${set} { ip6 saddr }`,
        `meta l4proto ${this.proto} dnat ip6 to ${id}`,
      ]);
      return `ip6 saddr @${set} goto ${chain}`;
    });
    // New clients: pick uniformly through the endpoint chains, so the choice is recorded.
    const picks = endpoints.map((ep, i) => {
      const chain = serviceChainName("endpoint", spn, formatEndpoint(ep));
      const left = endpoints.length - i;
      return left === 1 ? `goto ${chain}` : `numgen random mod ${left} == 0 goto ${chain}`;
    });
    this.chains.set(name, [...checks, ...picks]);
    return name;
  }

  /** The service's external chain (external IPs, LB IPs, node ports). */
  externalChain(cluster: readonly Endpoint[], local: readonly Endpoint[]): string {
    const port = this.#port;
    const sticky = port.sessionAffinity !== null;
    const name = serviceChainName("external", port.name);
    const rules: string[] = [];
    if (!port.externalPolicyLocal) {
      rules.push(
        `jump ${NAMES.markForMasquerade}`,
        `goto ${this.balancer(cluster, { local: false, sticky })}`,
      );
    } else {
      if (cluster.length > 0) {
        const all = this.balancer(cluster, { local: false, sticky });
        if (this.#options.localMatch) rules.push(`${this.#options.localMatch} goto ${all}`);
        rules.push(`fib saddr type local jump ${NAMES.markForMasquerade}`);
        rules.push(`fib saddr type local goto ${all}`);
      }
      rules.push(
        local.length > 0 ? `goto ${this.balancer(local, { local: true, sticky })}` : "drop",
      );
    }
    this.chains.set(name, rules);
    return name;
  }

  /**
   * Adds an entry point's elements in an endpoint map; when the fragment has them already (an
   * address that is two entry points at once), element `i` is replaced and the rest kept.
   */
  #entryElements(group: EntryElements): void {
    const { set, entry } = group;
    const at = this.elements.findIndex((g) => g.set === set && g.entry === entry);
    if (at < 0) {
      this.elements.push(group);
      return;
    }
    const lines = (this.elements[at] as EntryElements).text.split(ELEMENT_SEPARATOR);
    group.text.split(ELEMENT_SEPARATOR).forEach((line, i) => lines[i] = line);
    this.elements[at] = { set, entry, count: lines.length, text: lines.join(ELEMENT_SEPARATOR) };
  }

  build(): Fragment {
    return this.#sets === undefined
      ? { chains: this.chains, elements: this.elements }
      : { chains: this.chains, elements: this.elements, sets: this.#sets };
  }
}

/** Rules of `affinity-<T>` (IPv4): remember, per client and entry point, the endpoint chosen. */
function affinityRecorderRules(timeoutSeconds: number): string[] {
  return PROTOCOLS.map((p) =>
    `meta l4proto ${p} update @${NAMES.affinity} { ip saddr . ct original ip daddr . meta l4proto . ct original proto-dst timeout ${timeoutSeconds}s : ip daddr . ${p} dport }`
  );
}
