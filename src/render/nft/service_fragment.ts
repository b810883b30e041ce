/**
 * The fragment one service port adds to an nft family's table: its elements in the fixed maps
 * and sets (dispatch, endpoints, no-endpoint verdicts, firewall, hairpin, affinity) and the
 * few chains it needs — shared balancers, its external chain, IPv6 affinity chains.
 *
 * Pure functions of state and options. Per-service state lives in elements of a fixed set of
 * maps and in plain rules; the few rules that look up a named map (`lb-N` balancers, affinity)
 * are shared by every service with the same shape, because the kernel's cost of binding a map
 * to a rule grows with the number of such rules (a rule per service referencing one map took 30 s
 * at 10k services here; a shared rule took 2 s).
 *
 * - Cluster IPs go straight to a shared balancer chain (`lb-N`, or `local-lb-N` for
 *   internalTrafficPolicy Local); external entries go through the service's `external-…`
 *   chain, which masquerades (eTP Cluster) or short-circuits pods and the node to all endpoints
 *   and sends the rest to this node's endpoints (eTP Local).
 * - Each entry point (cluster IP, external IP, LB IP) has its own N elements in
 *   `cluster-endpoints` or `local-endpoints`, keyed `entry . index`; a node port has N in
 *   `cluster-nodeport-endpoints` or `local-nodeport-endpoints`, keyed `proto . port . index`,
 *   whichever node address it is reached on.
 *
 * @module
 */
import type { Endpoint } from "../../model/endpoint.ts";
import { formatEndpoint } from "../../model/endpoint.ts";
import { cidrContains } from "../../model/ip.ts";
import { type ServicePort, servicePortKey } from "../../model/service_port.ts";
import { selectEndpoints } from "../endpoints.ts";
import { AffinityIds, formatAffinityId } from "./affinity.ts";
import { ELEMENT_SEPARATOR, type EntryElements, type Fragment } from "./fragment.ts";
import {
  affinityChainName,
  balancerChainName,
  type BalancerSpec,
  endpointMapName,
  NAMES,
  NFT_PROTOCOLS,
  type NftProtocol,
  safeComment,
  serviceChainName,
  serviceComment,
} from "./names.ts";
import type { NftRenderOptions } from "./options.ts";
import { endpointPick } from "./scheduler.ts";
import type { SetDef } from "./transaction.ts";

/**
 * An entry point's elements that keep their endpoints (the state's own objects) rather than
 * their text, and write the text each time it is read: what the planner remembers of a
 * 100k-endpoint table is then ~a pointer per endpoint instead of ~70 bytes of text, and a full
 * render leaves no per-entry text behind for the garbage collector to move.
 *
 * Endpoint elements carry no comment: their key starts with the entry point, whose
 * `service-ips` / `service-nodeports` element names the service port, and at 100k endpoints
 * the comments cost nft ~10 % of a cold start's `nft -f` (0.1–0.2 s here).
 */
class EndpointElements implements EntryElements {
  readonly set: string;
  readonly entry: string;
  readonly #endpoints: readonly Endpoint[];

  constructor(set: string, entry: string, endpoints: readonly Endpoint[]) {
    this.set = set;
    this.entry = entry;
    this.#endpoints = endpoints;
  }

  get count(): number {
    return this.#endpoints.length;
  }

  get text(): string {
    const endpoints = this.#endpoints;
    const elements = new Array<string>(endpoints.length);
    for (let i = 0; i < endpoints.length; i++) {
      const ep = endpoints[i];
      elements[i] = `${this.entry} . ${i} : ${ep.ip} . ${ep.port}`;
    }
    return elements.join(ELEMENT_SEPARATOR);
  }
}

/** A shared balancer chain: its name and a one-chain map of it. */
interface SharedChain {
  readonly name: string;
  readonly chains: ReadonlyMap<string, readonly string[]>;
}

/**
 * The shared balancer chains, per render options (so per plan and family) and
 * {@link balancerKey}: every service port with N endpoints renders the same `lb-…-N` chain, so
 * its name and rules are written once per plan instead of once per port, and the ports whose
 * only chain is a balancer share its one-chain map.
 */
const balancers = new WeakMap<NftRenderOptions, Map<number, SharedChain>>();

/** A balancer's chain (made once per options and key). */
function sharedChain(
  options: NftRenderOptions,
  key: number,
  make: () => [string, readonly string[]],
): SharedChain {
  let byKey = balancers.get(options);
  if (byKey === undefined) balancers.set(options, byKey = new Map());
  let chain = byKey.get(key);
  if (chain === undefined) {
    const [name, rules] = make();
    byKey.set(key, chain = { name, chains: new Map([[name, rules]]) });
  }
  return chain;
}

/** A small integer per balancer spec (a map key that needs no string). */
function balancerKey(spec: BalancerSpec): number {
  const protocol = NFT_PROTOCOLS.indexOf(spec.protocol);
  return ((spec.count * 3 + protocol) * 2 + (spec.local ? 1 : 0)) * 2 + (spec.sticky ? 1 : 0);
}

/**
 * One way into a service port: the address and port the client used, or a node port (on
 * whichever node address: no address).
 */
interface Entry {
  readonly address: string;
  readonly port: number;
  readonly nodePort?: true;
}

/**
 * Renders what one service port adds to a family's table, or null when the port has no
 * address in this family. `affinityIds` gives an IPv4 ClientIP port its id (see affinity.ts);
 * by default a fresh allocator, for callers that only read the rules.
 */
export function renderServicePort(
  port: ServicePort,
  endpoints: readonly Endpoint[],
  options: NftRenderOptions,
  affinityIds: AffinityIds = new AffinityIds(),
): Fragment | null {
  const v6 = options.family === "ip6";
  const inFamily = (ips: readonly string[]) => ofFamily(ips, v6);
  const clusterIP = port.clusterIPs.find((ip) => ip.includes(":") === v6);
  if (clusterIP === undefined) return null;
  const r = new FragmentBuilder(port, options, affinityIds);
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
  const addresses = port.externalIPs.length + port.loadBalancerIPs.length === 0
    ? port.externalIPs
    : [...inFamily(port.externalIPs), ...inFamily(port.loadBalancerIPs)];
  const addressEntries = addresses.map((address): Entry => ({ address, port: port.port }));
  const servesNodePorts = options.nodePortsOnAllAddresses || options.nodePortIPs.length > 0;
  const nodePortEntries: Entry[] = port.nodePort === 0 || !servesNodePorts
    ? []
    : [{ address: "", port: port.nodePort, nodePort: true }];
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

  // loadBalancerSourceRanges guard the load-balancer IPs only, each family with its own
  // ranges; a family without ranges stays open (upstream filters the ranges per family).
  const ranges = outermost(inFamily(port.loadBalancerSourceRanges));
  if (ranges.length > 0) {
    const nodeInRange = options.nodeIPs.some((ip) => ranges.some((c) => cidrContains(c, ip)));
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
function outermost(cidrs: readonly string[]): readonly string[] {
  if (cidrs.length === 0) return cidrs;
  const byWidth = [...new Set(cidrs)]
    .sort((a, b) => Number(a.split("/")[1]) - Number(b.split("/")[1]));
  const kept: string[] = [];
  for (const cidr of byWidth) {
    if (!kept.some((outer) => cidrContains(outer, cidr.split("/")[0]))) kept.push(cidr);
  }
  return kept;
}

const NO_CHAINS: ReadonlyMap<string, readonly string[]> = new Map();

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
  /**
   * The chains so far: none, a shared balancer's one-chain map (most ports: see
   * {@link sharedChain}), or this port's own map.
   */
  #chains: ReadonlyMap<string, readonly string[]> | undefined;
  /** {@link #chains} is this port's own map (not a shared one). */
  #ownChains = false;
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

  /** The IPv4 ClientIP id (`meta priority`) of this service port, or "" without one. */
  readonly #affinityId: string;

  constructor(port: ServicePort, options: NftRenderOptions, affinityIds: AffinityIds) {
    this.#port = port;
    this.#options = options;
    this.#affinityId = port.sessionAffinity !== null && options.family === "ip"
      ? formatAffinityId(affinityIds.idOf(servicePortKey(port.name)))
      : "";
    this.proto = port.name.protocol.toLowerCase() as NftProtocol;
    this.#comment = serviceComment(port.name);
    this.#commentText = this.#comment ? ` comment "${this.#comment}"` : "";
  }

  serviceKey(entry: Entry): string {
    // One string per entry point (keys are kept), and flat: joined, not a tree of pieces.
    if (entry !== this.#lastEntry) {
      this.#lastEntry = entry;
      this.#lastKey = entry.nodePort
        ? [this.proto, entry.port].join(" . ")
        : [entry.address, this.proto, entry.port].join(" . ");
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
    const map = endpointMapName(local, this.proto, entry.nodePort);
    const key = this.serviceKey(entry);
    if (endpoints.length > 0) {
      this.#entryElements(new EndpointElements(map, key, endpoints));
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
    if (affinity !== null && this.#affinityId !== "") {
      // Every entry point of the port leads to its one id; the id to its recorder.
      const recorder = affinityChainName(affinity.timeoutSeconds);
      this.#chain(recorder, affinityRecorderRules(affinity.timeoutSeconds));
      this.element(
        entry.nodePort ? NAMES.affinityNodeportIds : NAMES.affinityIds,
        key,
        this.#affinityId,
      );
      this.element(NAMES.affinityRecorders, this.#affinityId, `jump ${recorder}`);
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
    const plain: BalancerSpec = { ...spec, sticky: false };
    const plainName = this.#sharedChain(plain, () => {
      const map = endpointMapName(spec.local, spec.protocol);
      const nodePortMap = endpointMapName(spec.local, spec.protocol, true);
      const pick = endpointPick(this.#options.scheduler, f, spec.count);
      return [balancerChainName(plain), [
        `dnat ${f} to ${f} daddr . meta l4proto . th dport . ${pick} map @${map}`,
        // No element for the packet's address: a node port, on whichever local address.
        `dnat ${f} to meta l4proto . th dport . ${pick} map @${nodePortMap}`,
      ]];
    });
    if (!spec.sticky) return plainName;
    return this.#sharedChain(spec, () => [balancerChainName(spec), [
      // The service port's id, unless the packet carries a priority of its own (then no
      // affinity: the id would overwrite it).
      `meta priority none meta priority set ${f} daddr . meta l4proto . th dport map @${NAMES.affinityIds}`,
      `meta priority none meta priority set meta l4proto . th dport map @${NAMES.affinityNodeportIds}`,
      `meta l4proto ${spec.protocol} dnat ${f} to ${f} saddr . meta priority map @${NAMES.affinity}`,
      `goto ${plainName}`,
    ]]);
  }

  /** Adds a chain of this port's. */
  #chain(name: string, rules: readonly string[]): void {
    if (this.#chains === undefined) this.#chains = new Map([[name, rules]]);
    else if (this.#ownChains) (this.#chains as Map<string, readonly string[]>).set(name, rules);
    else if (this.#chains.get(name) !== rules) {
      this.#chains = new Map([...this.#chains, [name, rules]]);
    } else return;
    this.#ownChains = true;
  }

  /** Adds a balancer's chain (rules depending only on its spec and the options); its name. */
  #sharedChain(spec: BalancerSpec, make: () => [string, readonly string[]]): string {
    const { name, chains } = sharedChain(this.#options, balancerKey(spec), make);
    if (this.#chains === undefined) this.#chains = chains;
    else this.#chain(name, chains.get(name)!);
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
      this.#chain(chain, [
        `update @${set} { ip6 saddr }`,
        `meta l4proto ${this.proto} dnat ip6 to ${id}`,
      ]);
      return `ip6 saddr @${set} goto ${chain}`;
    });
    // New clients: pick through the endpoint chains, so the choice is recorded. At random a
    // cascade of 1-in-k choices; the other schedulers index one verdict map with their pick
    // (a cascade would give each rule its own counter or hash).
    const targets = endpoints.map((ep) => serviceChainName("endpoint", spn, formatEndpoint(ep)));
    const scheduler = this.#options.scheduler;
    const picks = scheduler === "random"
      ? targets.map((chain, i) => {
        const left = targets.length - i;
        return left === 1 ? `goto ${chain}` : `numgen random mod ${left} == 0 goto ${chain}`;
      })
      : [
        `${endpointPick(scheduler, "ip6", targets.length)} vmap { ${
          targets.map((chain, i) => `${i} : goto ${chain}`).join(", ")
        } }`,
      ];
    this.#chain(name, [...checks, ...picks]);
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
    this.#chain(name, rules);
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
    const chains = this.#chains ?? NO_CHAINS;
    return this.#sets === undefined
      ? { chains, elements: this.elements }
      : { chains, elements: this.elements, sets: this.#sets };
  }
}

/**
 * Rules of `affinity-<T>` (IPv4): remember, per client and service port (its id, in `meta
 * priority`), the endpoint chosen; then clear the priority, which only carried the id.
 */
function affinityRecorderRules(timeoutSeconds: number): string[] {
  return [
    ...NFT_PROTOCOLS.map((p) =>
      `meta l4proto ${p} ct status dnat update @${NAMES.affinity} { ip saddr . meta priority timeout ${timeoutSeconds}s : ip daddr . ${p} dport }`
    ),
    "meta priority set none",
  ];
}
