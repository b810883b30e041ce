/**
 * What happened to one traced connection, read from its trace events: the hooks it passed,
 * every chain (ours and other tables') with the rule that decided there, the lookup that named
 * its Service port, whether it was masqueraded and why, and the final verdict with the rule that
 * gave it.
 *
 * Pure: the kernel's answers the summary needs besides the events (which hook a base chain is
 * on, a map element's comment, the conntrack entry) are passed in or filled in by the command.
 *
 * @module
 */
import { NAMES } from "../render/nft/names.ts";
import type { PacketFields, TraceEvent } from "./events.ts";

/** The connection a traced packet opens, as its first `packet:` line shows it. */
export interface Flow {
  readonly family: "ipv4" | "ipv6";
  readonly protocol: string;
  readonly source: string;
  readonly sourcePort: number | null;
  readonly destination: string;
  readonly destinationPort: number | null;
}

/** One pass through one chain. */
export interface ChainPass {
  /** `FAMILY TABLE`, e.g. `ip kube-nftproxy`, `inet firewall`. */
  readonly table: string;
  readonly chain: string;
  /** The chain is in our table. */
  readonly ours: boolean;
  /** The base chain's hook, when it is one (from `nft list chains`). */
  readonly hook: string | null;
  /** The rule that decided in this chain, or null for the chain's policy or end. */
  readonly rule: string | null;
  /** `accept`, `drop`, `goto lb-tcp-3`, `continue` (fell through), `policy accept`, … */
  readonly verdict: string;
}

/** A map or set lookup that names the Service port (its element carries the name). */
export interface ServiceLookup {
  /** Family of our table: `ip` or `ip6`. */
  readonly family: string;
  readonly set: string;
  /** The element's key, as nft takes it (`10.96.0.10 . tcp . 80`). */
  readonly key: string;
}

/** The final verdict of the connection's first packet. */
export type TraceVerdict = "accepted" | "dropped" | "rejected";

/** One traced connection, before the kernel lookups. */
export interface TraceSummary {
  readonly traceId: string;
  readonly flow: Flow;
  /** Hooks in order: `prerouting`, `input`, `forward`, `output`, `postrouting`. */
  readonly hooks: readonly string[];
  readonly chains: readonly ChainPass[];
  /** The element naming the Service port, when one of our dispatch lookups matched. */
  readonly serviceLookup: ServiceLookup | null;
  /** The Service port read from a per-service chain's name, as `namespace/name:port`. */
  readonly serviceChain: string | null;
  /** Where the trace saw the packet go after DNAT (null: not DNATed, or not seen). */
  readonly dnatSeen: { readonly ip: string; readonly port: number | null } | null;
  readonly masquerade: boolean;
  /** Why it was marked for masquerading: the marking chain and rule, in words. */
  readonly masqueradeReason: string | null;
  readonly verdict: TraceVerdict;
  /** The chain and rule that dropped or rejected it; null when accepted. */
  readonly decidedBy: ChainPass | null;
  /** Other tables' chains that accepted or dropped it (the tables, once each). */
  readonly foreignTables: readonly string[];
}

/** What {@link summarize} knows besides the events. */
export interface SummaryContext {
  /** Our table's name (`kube-nftproxy`). */
  readonly table: string;
  /** The trace table's name: its chains are left out of the summary. */
  readonly traceTable: string;
  /** `FAMILY TABLE CHAIN` → hook, for base chains. */
  readonly hooks: ReadonlyMap<string, string>;
}

const DISPATCH_MAPS: readonly string[] = [
  NAMES.serviceIPs,
  NAMES.serviceNodeports,
  NAMES.noEndpointServices,
  NAMES.noEndpointNodeports,
  NAMES.firewallIPs,
];

/**
 * Summarizes one packet's trace events (all of one trace id, in order). Null when no event
 * shows the packet (a trace cut short).
 */
export function summarize(
  events: readonly TraceEvent[],
  context: SummaryContext,
): TraceSummary | null {
  const packets = events.filter((e) => e.kind === "packet").map((e) => e.packet);
  const first = packets.find((p) => p.saddr !== undefined && p.daddr !== undefined);
  if (first === undefined) return null;
  const flow = flowOf(first);
  const hooks: string[] = [];
  const chains: ChainPass[] = [];
  /** The pass under way: its chain, and its decision once a rule, policy or end gave one. */
  let pass: { -readonly [K in keyof ChainPass]: ChainPass[K] } | null = null;
  let decided = false;
  let serviceLookup: ServiceLookup | null = null;
  let serviceChain: string | null = null;
  let masquerade = false;
  let masqueradeReason: string | null = null;
  let verdict: TraceVerdict = "accepted";
  let decidedBy: ChainPass | null = null;
  const foreign: string[] = [];
  for (const event of events) {
    const table = `${event.family} ${event.table}`;
    if (event.table === context.traceTable) {
      // Its chains are named after their hooks; it decides nothing.
      if (event.kind === "packet") pushHook(hooks, event.chain);
      continue;
    }
    const ours = event.table === context.table;
    const hook = context.hooks.get(`${table} ${event.chain}`) ?? null;
    // A packet line opens a base chain; a rule elsewhere means a jump, goto or return.
    if (
      pass === null || event.kind === "packet" || pass.table !== table ||
      pass.chain !== event.chain
    ) {
      pass = { table, chain: event.chain, ours, hook, rule: null, verdict: "continue" };
      decided = false;
      chains.push(pass);
    }
    if (!ours && !foreign.includes(table)) foreign.push(table);
    if (ours) serviceChain ??= servicePortOfChain(event.chain);
    if (event.kind === "packet") {
      if (hook !== null) pushHook(hooks, hook);
      continue;
    }
    const rule = event.kind === "rule" ? event.rule : null;
    const said = event.kind === "policy" ? `policy ${event.verdict}` : event.verdict;
    if (event.kind === "rule" ? event.verdict !== "continue" : !decided) {
      pass.rule = rule;
      pass.verdict = said;
      decided = true;
    }
    if (ours && rule !== null && event.verdict !== "continue") {
      serviceLookup = lookupOf(rule, event.family, flow) ?? serviceLookup;
      if (event.verdict === `jump ${NAMES.markForMasquerade}`) {
        masqueradeReason = masqueradeWhy(event.chain, rule);
      }
      if (event.chain === NAMES.masquerading && /\bmasquerade\b/.test(rule)) masquerade = true;
    }
    if (event.verdict === "drop" && verdict === "accepted") {
      verdict = rule !== null && /\breject\b/.test(rule) ? "rejected" : "dropped";
      decidedBy = { ...pass };
    }
  }
  return {
    traceId: events[0].id,
    flow,
    hooks,
    chains,
    serviceLookup,
    serviceChain,
    dnatSeen: dnatOf(flow, packets),
    masquerade,
    masqueradeReason: masquerade ? masqueradeReason : null,
    verdict,
    decidedBy,
    foreignTables: foreign,
  };
}

function pushHook(hooks: string[], hook: string): void {
  if (hooks[hooks.length - 1] !== hook) hooks.push(hook);
}

function flowOf(p: PacketFields): Flow {
  return {
    family: p.saddr!.includes(":") ? "ipv6" : "ipv4",
    protocol: p.protocol ?? "unknown",
    source: p.saddr!,
    sourcePort: p.sport ?? null,
    destination: p.daddr!,
    destinationPort: p.dport ?? null,
  };
}

/** The last address and port the trace saw the packet sent to, when DNAT changed them. */
function dnatOf(flow: Flow, packets: readonly PacketFields[]): TraceSummary["dnatSeen"] {
  for (let i = packets.length - 1; i >= 0; i--) {
    const p = packets[i];
    if (p.daddr === undefined) continue;
    if (p.daddr === flow.destination && (p.dport ?? null) === flow.destinationPort) return null;
    return { ip: p.daddr, port: p.dport ?? null };
  }
  return null;
}

/** The element of our dispatch maps a matched rule looked up for this flow. */
function lookupOf(rule: string, family: string, flow: Flow): ServiceLookup | null {
  const set = DISPATCH_MAPS.find((name) =>
    rule.includes(`@${name}`) && !rule.includes(`@${name}-`)
  );
  if (set === undefined || flow.destinationPort === null) return null;
  const byPort = set === NAMES.serviceNodeports || set === NAMES.noEndpointNodeports;
  const tail = `${flow.protocol} . ${flow.destinationPort}`;
  return { family, set, key: byPort ? tail : `${flow.destination} . ${tail}` };
}

/** Why a rule in `chain` marked the packet for masquerading, in words. */
function masqueradeWhy(chain: string, rule: string): string {
  let why: string;
  if (chain === NAMES.services) {
    why = /saddr|iifname/.test(rule)
      ? "a source that is not a pod (off-cluster, or the node itself) to a cluster IP"
      : "masqueradeAll: every packet to a cluster IP";
  } else if (chain.startsWith("external-")) {
    why = /fib saddr type local/.test(rule)
      ? "the node itself to an external entry (externalTrafficPolicy Local)"
      : "an external entry with externalTrafficPolicy Cluster";
  } else if (rule.includes(`@${NAMES.hairpinEndpoints}`)) {
    why = "hairpin: an endpoint reached itself through the service";
  } else {
    why = "marked";
  }
  return `${why} (${chain}: ${rule})`;
}

/**
 * The Service port a per-service chain is named after (`external-HASH-ns/name/proto/port`, see
 * `serviceChainName` in render/nft/names.ts), as `namespace/name:port`; null for other chains.
 */
function servicePortOfChain(chain: string): string | null {
  const m =
    /^(?:external|sticky|sticky-local|endpoint)-[0-9A-Za-z]+-([^/]+)\/([^/]+)\/[a-z]+\/([^/_]*)/
      .exec(chain);
  if (m === null) return null;
  return m[3] === "" ? `${m[1]}/${m[2]}` : `${m[1]}/${m[2]}:${m[3]}`;
}
