/**
 * Explains one packet: walks the nft ruleset the proxy would program for a state and says where
 * a new connection from a source address to a destination goes — which hook and chains it
 * passes, which service port and entry point match, which endpoints are eligible and how likely
 * each is, whether it is masqueraded, or which rule rejects or drops it.
 *
 * Pure: the rules come from the renderer itself (`renderServicePort` with `nftRenderOptions`),
 * so endpoint selection, topology, traffic policies and local-traffic detection are the
 * renderer's; this module only follows the rendered elements and chains the way the kernel
 * would for the packet's source.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import type { Endpoint } from "../model/endpoint.ts";
import { cidrContains, parseAddress } from "../model/ip.ts";
import type { NodeInfo } from "../model/node.ts";
import { familyOf, formatServicePortName, type ServicePort } from "../model/service_port.ts";
import { NAMES } from "../render/nft/names.ts";
import { ELEMENT_SEPARATOR, type Fragment } from "../render/nft/fragment.ts";
import { type NftRenderOptions, nftRenderOptions } from "../render/nft/options.ts";
import { renderServicePort } from "../render/nft/service_fragment.ts";
import { nftFamilyOf } from "../render/nft/transaction.ts";

/** What an explanation is computed from: the proxy's state and configuration. */
export interface ExplainInput {
  readonly config: Config;
  /** Service ports by service port key. */
  readonly services: ReadonlyMap<string, ServicePort>;
  /** Endpoints by service port key. */
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
  readonly node: NodeInfo | null;
  readonly serviceCIDRs: readonly string[];
  /** This node's interface addresses, when known (CIDR `nodePortAddresses`; node sources). */
  readonly localAddresses?: readonly string[];
}

/** Where a packet is sent: address, port and transport protocol. */
export interface Target {
  /** Canonical address. */
  readonly address: string;
  readonly port: number;
  readonly protocol: "tcp" | "udp" | "sctp";
}

/** The packet to explain: the first packet of a new connection. */
export interface PacketQuery {
  /** Source address. */
  readonly from: string;
  readonly to: Target;
}

/** What happens to the connection. */
export type Verdict = "dnat" | "reject" | "drop" | "no-match";

/** One eligible endpoint and the chance a new connection picks it. */
export interface ExplainedEndpoint {
  readonly ip: string;
  readonly port: number;
  /** 1/N for each of N endpoints (before ClientIP affinity). */
  readonly probability: number;
}

/** The explanation of one packet. */
export interface Explanation {
  readonly verdict: Verdict;
  /** `namespace/name:port` of the matched service port, or null. */
  readonly servicePort: string | null;
  /** The entry point that matched (e.g. `cluster IP 10.96.0.10:80/tcp`), or null. */
  readonly entry: string | null;
  /** Hooks, chains and maps the packet passes, in order. */
  readonly path: readonly string[];
  /** Eligible endpoints (empty unless the verdict is `dnat`). */
  readonly endpoints: readonly ExplainedEndpoint[];
  /** The source address is replaced by the node's (always, not only on a hairpin). */
  readonly masquerade: boolean;
  /** Why: the deciding rules and elements, one sentence each. */
  readonly reason: string;
  /** How the rules see the source: a local pod, the node itself, or off-cluster. */
  readonly source: "pod" | "node" | "off-cluster";
  /** ClientIP affinity: a returning client keeps its endpoint. */
  readonly sticky: boolean;
  /** The destination is one of this node's addresses (unmatched traffic reaches its stack). */
  readonly toNode: boolean;
}

/** Everything the rendered rules of one family hold, indexed for lookups. */
interface RuleIndex {
  /** set → key → element (value and owning service port). */
  readonly elements: Map<string, Map<string, { value: string | null; port: ServicePort }>>;
  /** `map|entry` → endpoints in index order. */
  readonly entries: Map<string, { ip: string; port: number }[]>;
  readonly chains: Map<string, readonly string[]>;
}

const MAX_CHAIN_VISITS = 32;

/**
 * Explains what the rules rendered from `input` do with the first packet of `query`.
 * Throws when the source and destination are of different families.
 *
 * @example
 * ```ts
 * const e = explainPacket(input, {
 *   from: "192.168.77.2",
 *   to: { address: "10.96.0.10", port: 80, protocol: "tcp" },
 * });
 * e.verdict; // "dnat"
 * ```
 */
export function explainPacket(input: ExplainInput, query: PacketQuery): Explanation {
  const { from, to } = query;
  if (familyOf(from) !== familyOf(to.address)) {
    throw new Error(`source ${from} and destination ${to.address} are of different IP families`);
  }
  const options = nftRenderOptions(input.config, {
    node: input.node,
    serviceCIDRs: input.serviceCIDRs,
    localAddresses: input.localAddresses,
  }, nftFamilyOf(familyOf(to.address)));
  return new Walk(input, options, buildIndex(input, options), query).run();
}

function buildIndex(input: ExplainInput, options: NftRenderOptions): RuleIndex {
  const index: RuleIndex = { elements: new Map(), entries: new Map(), chains: new Map() };
  for (const [key, port] of input.services) {
    const fragment = renderServicePort(port, input.endpoints.get(key) ?? [], options);
    if (fragment !== null) addFragment(index, port, fragment);
  }
  return index;
}

function addFragment(index: RuleIndex, port: ServicePort, fragment: Fragment): void {
  for (const [name, rules] of fragment.chains) index.chains.set(name, rules);
  for (const group of fragment.elements) {
    if (group.entry !== undefined) {
      const endpoints = group.text.split(ELEMENT_SEPARATOR).map((line) => {
        const m = / : (\S+) \. (\d+)$/.exec(line);
        return { ip: m?.[1] ?? "", port: Number(m?.[2] ?? 0) };
      });
      index.entries.set(`${group.set}|${group.entry}`, endpoints);
      continue;
    }
    let set = index.elements.get(group.set);
    if (set === undefined) index.elements.set(group.set, set = new Map());
    group.keys.forEach((key, i) =>
      set.set(key, { value: elementValue(key, group.lines[i]), port })
    );
  }
}

/** The value of a formatted element (`key comment "…" : value`), or null for a set element. */
function elementValue(key: string, line: string): string | null {
  const rest = line.slice(key.length).replace(/^ comment "(?:[^"\\]|\\.)*"/, "");
  return rest.startsWith(" : ") ? rest.slice(3) : null;
}

/** One walk of a packet through the rules. */
class Walk {
  readonly #input: ExplainInput;
  readonly #options: NftRenderOptions;
  readonly #index: RuleIndex;
  readonly #from: string;
  readonly #to: Target;
  readonly #key: string;
  readonly #nodeAddresses: Set<string>;
  readonly #source: Explanation["source"];
  readonly #isNode: boolean;
  readonly #toNode: boolean;
  readonly #path: string[] = [];
  readonly #reasons: string[] = [];
  #masquerade = false;
  #sticky = false;
  #servicePort: ServicePort | null = null;
  #entry: string | null = null;

  constructor(input: ExplainInput, options: NftRenderOptions, index: RuleIndex, q: PacketQuery) {
    this.#input = input;
    this.#options = options;
    this.#index = index;
    this.#from = q.from;
    this.#to = q.to;
    this.#key = `${q.to.address} . ${q.to.protocol} . ${q.to.port}`;
    this.#nodeAddresses = new Set([
      ...(input.node?.ips ?? []),
      ...options.nodePortIPs,
      ...(input.localAddresses ?? []),
    ]);
    this.#isNode = this.#nodeAddresses.has(q.from) || isLoopback(q.from);
    this.#toNode = this.#nodeAddresses.has(q.to.address) || isLoopback(q.to.address);
    this.#source = this.#isNode ? "node" : this.#fromLocalPod() ? "pod" : "off-cluster";
  }

  run(): Explanation {
    return this.#isNode ? this.#output() : this.#prerouting();
  }

  /** A packet arriving at the node (from a pod or an off-cluster client). */
  #prerouting(): Explanation {
    this.#path.push("prerouting", NAMES.filterPrerouting);
    const firewalled = this.#firewall();
    if (firewalled) return firewalled;
    const nat = this.#services(NAMES.natPrerouting);
    if (nat) return nat;
    if (this.#toNode) {
      this.#path.push("input", NAMES.filterInput);
      return this.#nodePortCheck() ?? this.#serviceCheck() ?? this.#noMatch();
    }
    this.#path.push("forward", NAMES.filterForward);
    return this.#serviceCheck() ?? this.#clusterIPsCheck() ?? this.#noMatch();
  }

  /** A packet the node sends itself. */
  #output(): Explanation {
    this.#path.push("output", NAMES.filterOutput);
    const checked = this.#serviceCheck() ?? this.#nodePortCheck() ?? this.#firewall();
    if (checked) return checked;
    const nat = this.#services(NAMES.natOutput);
    if (nat) return nat;
    this.#path.push(NAMES.filterOutputPostDnat);
    return this.#clusterIPsCheck() ?? this.#noMatch();
  }

  /** `firewall-check`: loadBalancerSourceRanges. */
  #firewall(): Explanation | null {
    const guarded = this.#element(NAMES.firewallIPs, this.#key);
    if (guarded === undefined) return null;
    this.#path.push(NAMES.firewallCheck);
    this.#matched(guarded.port, `load-balancer IP ${this.#entryText()}`);
    const prefix = `${this.#key} . `;
    const allowed = [...this.#index.elements.get(NAMES.firewallAllow)?.keys() ?? []]
      .filter((k) => k.startsWith(prefix))
      .map((k) => k.slice(prefix.length))
      .find((range) => contains(range, this.#from));
    if (allowed !== undefined) {
      this.#reasons.push(`firewall-allow lets ${this.#from} in (${allowed})`);
      return null;
    }
    return this.#finish(
      "drop",
      `loadBalancerSourceRanges: ${this.#from} is in no allowed range, firewall-ips element ` +
        `${this.#key} → drop`,
    );
  }

  /** The nat chain and `services`: masquerade mark, then the two dispatch maps. */
  #services(natChain: string): Explanation | null {
    this.#path.push(natChain, NAMES.services);
    if (this.#has(NAMES.clusterIPs, this.#to.address)) {
      if (this.#options.masqueradeAll) {
        this.#mark("masqueradeAll marks every packet to a cluster IP");
      } else if (this.#options.notLocalMatch !== null && this.#source !== "pod") {
        this.#mark(`a source not matching ${this.#options.localMatch} is off-cluster`);
      }
    }
    const serviceIP = this.#element(NAMES.serviceIPs, this.#key);
    if (serviceIP !== undefined) {
      this.#path.push(NAMES.serviceIPs);
      this.#matched(serviceIP.port, this.#addressEntry(serviceIP.port));
      return this.#verdict(serviceIP.value ?? "");
    }
    if (this.#has(NAMES.nodeportIPs, this.#to.address)) {
      const nodePort = this.#element(NAMES.serviceNodeports, this.#portKey());
      if (nodePort !== undefined) {
        this.#path.push(NAMES.serviceNodeports);
        this.#matched(nodePort.port, this.#nodePortEntry());
        return this.#verdict(nodePort.value ?? "");
      }
    }
    this.#path.pop();
    this.#path.pop();
    return null;
  }

  /** Follows a verdict (`goto chain`, `drop`, …) until the packet is DNATed or dropped. */
  #verdict(first: string): Explanation {
    let verdict = first;
    for (let visits = 0; visits < MAX_CHAIN_VISITS; visits++) {
      if (verdict === "drop") {
        return this.#finish("drop", `${this.#path.at(-1)} → drop`);
      }
      const chain = /^goto (\S+)$/.exec(verdict)?.[1];
      if (chain === undefined) break;
      if (chain === NAMES.rejectChain) {
        this.#path.push(chain);
        return this.#finish("reject", `no usable endpoint → ${chain}`);
      }
      this.#path.push(chain);
      const next = this.#chain(chain);
      if (typeof next !== "string") return next;
      verdict = next;
    }
    return this.#finish("no-match", `unexpected verdict "${verdict}"`);
  }

  /** Runs one chain's rules; returns the verdict to follow or the final explanation. */
  #chain(name: string): string | Explanation {
    const rules = this.#index.chains.get(name) ?? [];
    const endpointChains: string[] = [];
    for (const rule of rules) {
      const m = /^(.*?)\s*(jump|goto) (\S+)$/.exec(rule);
      const balancer = /numgen random mod \d+ map @(\S+)$/.exec(rule);
      if (balancer) return this.#dnat(this.#index.entries.get(`${balancer[1]}|${this.#key}`));
      if (rule.includes(`map @${NAMES.affinity}`)) {
        this.#noteAffinity();
        continue;
      }
      if (rule === "drop") {
        return this.#finish(
          "drop",
          `${name}: externalTrafficPolicy Local and no endpoint on this node → drop`,
        );
      }
      if (m === null) continue;
      const [, condition, kind, target] = m;
      if (/^ip6 saddr @\S+$/.test(condition)) {
        this.#noteAffinity(); // IPv6 ClientIP: a remembered client goes to its endpoint chain
        continue;
      }
      if (/^numgen random mod \d+ == 0$/.test(condition)) {
        endpointChains.push(target);
        continue;
      }
      if (!this.#holds(condition)) continue;
      if (kind === "jump" && target === NAMES.markForMasquerade) {
        this.#mark(
          condition === ""
            ? "externalTrafficPolicy Cluster masquerades external traffic"
            : "the node's own traffic to an eTP Local entry is masqueraded",
        );
        continue;
      }
      if (endpointChains.length > 0) {
        endpointChains.push(target);
        return this.#dnat(endpointChains.flatMap((c) => this.#chainEndpoint(c)));
      }
      if (condition === this.#options.localMatch) {
        this.#reasons.push(`a local pod (${condition}) short-circuits to all endpoints`);
      } else if (condition === "fib saddr type local") {
        this.#reasons.push("the node itself short-circuits to all endpoints");
      }
      return `goto ${target}`;
    }
    return this.#finish("no-match", `chain ${name} ends without a verdict`);
  }

  /** The endpoint an IPv6 affinity endpoint chain DNATs to. */
  #chainEndpoint(chain: string): { ip: string; port: number }[] {
    for (const rule of this.#index.chains.get(chain) ?? []) {
      const m = /dnat ip6? to \[?([^\]\s]+?)\]?:(\d+)$/.exec(rule);
      if (m) return [{ ip: m[1], port: Number(m[2]) }];
    }
    return [];
  }

  #dnat(endpoints: { ip: string; port: number }[] | undefined): Explanation {
    const list = endpoints ?? [];
    if (list.length === 0) return this.#finish("no-match", "the balancer map has no element");
    const hairpin = list.some((ep) => ep.ip === this.#from) &&
      this.#has(NAMES.hairpinEndpoints, `${this.#from} . ${this.#from}`);
    if (hairpin) {
      this.#reasons.push(
        `hairpin: when ${this.#from} picks itself, hairpin-endpoints masquerades it`,
      );
      if (list.length === 1) this.#masquerade = true;
    }
    this.#path.push("postrouting", NAMES.natPostrouting);
    if (this.#masquerade) this.#path.push(NAMES.masquerading);
    const probability = 1 / list.length;
    return this.#finish(
      "dnat",
      list.length === 1
        ? "DNAT to its only eligible endpoint"
        : `DNAT to one of ${list.length} endpoints at random (numgen random mod ${list.length})`,
      list.map((ep) => ({ ...ep, probability })),
    );
  }

  /** `nodeport-endpoints-check`. */
  #nodePortCheck(): Explanation | null {
    if (!this.#has(NAMES.nodeportIPs, this.#to.address)) return null;
    const element = this.#element(NAMES.noEndpointNodeports, this.#portKey());
    if (element === undefined) return null;
    this.#path.push(NAMES.nodeportEndpointsCheck, NAMES.noEndpointNodeports);
    this.#matched(element.port, this.#nodePortEntry());
    return this.#noEndpoints(element.value ?? "", `${this.#portKey()}`);
  }

  /** `service-endpoints-check`. */
  #serviceCheck(): Explanation | null {
    const element = this.#element(NAMES.noEndpointServices, this.#key);
    if (element === undefined) return null;
    this.#path.push(NAMES.serviceEndpointsCheck, NAMES.noEndpointServices);
    this.#matched(element.port, this.#addressEntry(element.port));
    return this.#noEndpoints(element.value ?? "", this.#key);
  }

  #noEndpoints(value: string, key: string): Explanation {
    if (value === "drop") {
      return this.#finish(
        "drop",
        `internalTrafficPolicy Local and no endpoint on this node: ${NAMES.noEndpointServices} ` +
          `element ${key} → drop`,
      );
    }
    this.#path.push(NAMES.rejectChain);
    return this.#finish("reject", `no usable endpoint: element ${key} → goto ${NAMES.rejectChain}`);
  }

  /** `cluster-ips-check`: unused port of a cluster IP, unallocated service-CIDR address. */
  #clusterIPsCheck(): Explanation | null {
    if (this.#has(NAMES.clusterIPs, this.#to.address)) {
      this.#path.push(NAMES.clusterIPsCheck);
      return this.#finish(
        "reject",
        `${this.#to.address} is a cluster IP but no service uses ${this.#to.protocol} port ` +
          `${this.#to.port}: ${NAMES.clusterIPs} → reject`,
      );
    }
    const cidr = this.#options.serviceCIDRs.find((c) => contains(c, this.#to.address));
    if (cidr === undefined) return null;
    this.#path.push(NAMES.clusterIPsCheck);
    return this.#finish(
      "drop",
      `${this.#to.address} is in the service CIDR ${cidr} but no service has it → drop`,
    );
  }

  #noMatch(): Explanation {
    return this.#finish(
      "no-match",
      this.#toNode
        ? `no rule matches; ${this.#to.address} is this node's address, so the node's own ` +
          "stack answers (refused unless something listens there)"
        : "no rule matches; the packet is routed on unchanged",
    );
  }

  /** Evaluates a rule's condition for this packet. */
  #holds(condition: string): boolean {
    if (condition === "") return true;
    if (condition === "fib saddr type local") return this.#isNode;
    if (condition === this.#options.localMatch) return this.#source === "pod";
    return false;
  }

  /** Whether the local-traffic detector matches the source (as the rule would). */
  #fromLocalPod(): boolean {
    const match = this.#options.localMatch;
    if (match === null) return false;
    const cidr = /^ip6? saddr (\S+)$/.exec(match)?.[1];
    if (cidr !== undefined) return contains(cidr, this.#from);
    // Interface detectors: an address cannot name an interface; a pod of this node's pod CIDR
    // arrives on the pod interfaces.
    return (this.#input.node?.podCIDRs ?? []).some((c) => contains(c, this.#from));
  }

  #noteAffinity(): void {
    if (this.#sticky) return;
    this.#sticky = true;
    const timeout = this.#servicePort?.sessionAffinity?.timeoutSeconds;
    this.#reasons.push(
      `ClientIP affinity (${timeout}s): a client seen before keeps its endpoint; a new one ` +
        "picks at random",
    );
  }

  #mark(why: string): void {
    if (!this.#masquerade) this.#reasons.push(`masqueraded: ${why}`);
    this.#masquerade = true;
  }

  #matched(port: ServicePort, entry: string): void {
    this.#servicePort ??= port;
    this.#entry ??= entry;
  }

  #addressEntry(port: ServicePort): string {
    const a = this.#to.address;
    const kind = port.clusterIPs.includes(a)
      ? "cluster IP"
      : port.externalIPs.includes(a)
      ? "external IP"
      : "load-balancer IP";
    return `${kind} ${this.#entryText()}`;
  }

  #nodePortEntry(): string {
    return `node port ${this.#to.port}/${this.#to.protocol} on node address ${this.#to.address}`;
  }

  #entryText(): string {
    const a = this.#to.address;
    return `${a.includes(":") ? `[${a}]` : a}:${this.#to.port}/${this.#to.protocol}`;
  }

  #portKey(): string {
    return `${this.#to.protocol} . ${this.#to.port}`;
  }

  #element(set: string, key: string) {
    return this.#index.elements.get(set)?.get(key);
  }

  #has(set: string, key: string): boolean {
    if (set === NAMES.nodeportIPs) return this.#options.nodePortIPs.includes(key);
    return this.#index.elements.get(set)?.has(key) ?? false;
  }

  #finish(verdict: Verdict, why: string, endpoints: ExplainedEndpoint[] = []): Explanation {
    const masquerade = verdict === "dnat" && this.#masquerade;
    const reasons = verdict === "dnat"
      ? [why, ...this.#reasons]
      : [why, ...this.#reasons.filter((r) => !r.startsWith("masqueraded"))];
    return {
      verdict,
      servicePort: this.#servicePort === null
        ? null
        : formatServicePortName(this.#servicePort.name),
      entry: this.#entry,
      path: [...this.#path],
      endpoints,
      masquerade,
      reason: reasons.join("; "),
      source: this.#source,
      sticky: verdict === "dnat" && this.#sticky,
      toNode: this.#toNode,
    };
  }
}

/** A CIDR or single address contains an address. */
function contains(range: string, address: string): boolean {
  if (!range.includes("/")) return range === address;
  try {
    return cidrContains(range, address);
  } catch {
    return false;
  }
}

function isLoopback(address: string): boolean {
  return address === "::1" || address.startsWith("127.");
}

/**
 * Parses a target like `10.96.0.10:80/tcp`, `[fd00::10]:80/udp` or `10.96.0.10:80` (TCP).
 * Throws an Error naming the problem.
 */
export function parseTarget(text: string): Target {
  const m = /^(?:\[([^\]]+)\]|([^:/\[\]]+)):(\d+)(?:\/(tcp|udp|sctp))?$/i.exec(text.trim());
  if (m === null) throw new Error(`--to ${text}: want ADDRESS:PORT[/tcp|udp|sctp]`);
  const port = Number(m[3]);
  if (port < 1 || port > 65535) throw new Error(`--to ${text}: port out of range`);
  return {
    address: canonicalAddress(m[1] ?? m[2], "--to"),
    port,
    protocol: (m[4]?.toLowerCase() ?? "tcp") as Target["protocol"],
  };
}

/** The canonical text of an address; throws naming `what` when it is not one. */
export function canonicalAddress(text: string, what: string): string {
  const parsed = parseAddress(text);
  if (!parsed.ok) throw new Error(`${what} ${text}: not an IP address`);
  return parsed.address;
}
