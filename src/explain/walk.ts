/**
 * One walk of a packet through the indexed rules: the hooks and chains a new connection passes
 * from where it enters (prerouting, or output for the node's own traffic), which elements match,
 * which verdict each chain reaches, and why — the body of `explainPacket` (explain.ts).
 *
 * @module
 */
import { cidrContains } from "../model/ip.ts";
import { formatServicePortName, type ServicePort } from "../model/service_port.ts";
import { NAMES } from "../render/nft/names.ts";
import type { NftRenderOptions } from "../render/nft/options.ts";
import { ENDPOINT_PICK_PATTERN, endpointPick } from "../render/nft/scheduler.ts";
import type {
  ExplainedEndpoint,
  ExplainInput,
  Explanation,
  PacketQuery,
  Target,
  Verdict,
} from "./explain.ts";
import type { RuleIndex } from "./rule_index.ts";

/** How each scheduler chooses among the endpoints, in words. */
const HOW_PICKED: Readonly<Record<NftRenderOptions["scheduler"], string>> = {
  "random": "at random",
  "round-robin": "in turn",
  "source-hash": "by a hash of the client address",
};

const MAX_CHAIN_VISITS = 32;

/** One walk of a packet through the rules. */
export class Walk {
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
      const balancer = new RegExp(`${ENDPOINT_PICK_PATTERN.source} map @(\\S+)$`).exec(rule);
      if (balancer) {
        // A node-port map is keyed without the address; a miss goes on to the next rule.
        const key = rule.includes(" to meta l4proto") ? this.#portKey() : this.#key;
        const endpoints = this.#index.entries.get(`${balancer[2]}|${key}`);
        if (endpoints !== undefined) return this.#dnat(endpoints);
        continue;
      }
      const picked = / vmap \{ (.*) \}$/.exec(rule);
      if (picked !== null && ENDPOINT_PICK_PATTERN.test(rule)) {
        // IPv6 ClientIP with round-robin or source-hash: one verdict map of endpoint chains.
        const chains = [...picked[1].matchAll(/goto (\S+?)(?:,|$)/g)].map((g) => g[1]);
        return this.#dnat(chains.flatMap((c) => this.#chainEndpoint(c)));
      }
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
        : `DNAT to one of ${list.length} endpoints ${HOW_PICKED[this.#options.scheduler]} (${
          endpointPick(this.#options.scheduler, this.#options.family, list.length)
        })`,
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
    if (set === NAMES.nodeportIPs) {
      return this.#options.nodePortsOnAllAddresses
        ? this.#toNode && !isLoopback(key)
        : this.#options.nodePortIPs.includes(key);
    }
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
