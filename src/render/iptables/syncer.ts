/**
 * Sync planning for one iptables family: turns the proxy state and the set of changed service
 * ports into the `iptables-restore --noflush` section that brings the kernel from what was last
 * applied to what is wanted now.
 *
 * Pure (no I/O); what was planned becomes "applied" only when the caller commits. Like upstream
 * kube-proxy, a restore only ever declares (creates or flushes) and fills KUBE-* chains and
 * deletes stale per-service ones; built-in chains are never flushed (jump rules into them are
 * the applier's business, from the kernel's current rules).
 *
 * - A full sync declares and fills every chain and deletes the per-service chains it applied
 *   before and no longer wants (the applier adds leftovers of earlier processes). It also
 *   declares the empty {@link CANARY} chains (filter, nat and, last, mangle) whose absence
 *   tells the rules watcher that someone deleted our chains.
 * - A partial sync re-renders only the changed service ports. Their own chains are rewritten
 *   only where their rules changed; the fixed chains (KUBE-SERVICES, KUBE-NODEPORTS, the filter
 *   chains) are re-assembled from every service port's rules and rewritten only when they
 *   differ from what was applied — unlike upstream, which rewrites them on every sync, so a sync
 *   with no change sends nothing and an endpoint change sends only that service's chains.
 *   Chains of unchanged services are neither declared nor touched (declaring would flush them).
 *
 * @module
 */
import { familyOf, type ServicePort } from "../../model/service_port.ts";
import type { SyncInput, SyncRequest } from "../planner.ts";
import { CANARY, FIXED_CHAINS, NAT, type Table } from "./names.ts";
import type { IptablesRenderOptions } from "./options.ts";
import {
  type FixedChains,
  type Fragment,
  renderFixedChains,
  renderServicePort,
  type SharedRule,
} from "./ruleset.ts";
import { renderTable, sectionHeader } from "./script.ts";

/** A planned family section; call {@link commit} once `iptables-restore` has accepted it. */
export interface IptablesSyncPlan {
  /**
   * The section (header included), or "" when nothing is to change. A full section is written
   * only when this is read: the applier streams {@link chunks} instead.
   */
  readonly script: string;
  readonly full: boolean;
  /**
   * A full section planned with nothing applied before (the first sync, or after `reset()`):
   * only the kernel's whole tables can tell what an earlier process left behind.
   */
  readonly fresh: boolean;
  /** Number of service ports whose rules the plan changes. */
  readonly servicePortsChanged: number;
  /**
   * The section, rendered piece by piece as it is consumed (each piece ends with a newline),
   * completed with what only the kernel's current rules tell (see {@link SectionExtras}).
   * Deterministic: every call renders the same text for the same extras.
   */
  chunks(extras?: SectionExtras): Generator<string>;
  /** Characters of the section as last rendered whole (by {@link chunks} or {@link script}). */
  readonly sentBytes: number;
  /** Records the plan as applied. */
  commit(): void;
}

/** What the applier adds to a full section from the kernel's current rules. */
export interface SectionExtras {
  /** Lines right after a table's declarations (our missing jump rules, `-I …`). */
  readonly first?: Partial<Record<Table, readonly string[]>>;
  /**
   * Given every nat chain the section declares, leftover chains to flush and delete at the end
   * of the nat part.
   */
  readonly stale?: (declared: ReadonlySet<string>) => readonly string[];
  /**
   * Put a `-S` listing (to stdout, discarded) after the nat part's first lines when the
   * section names more chains than this (estimated as service ports + endpoints): iptables-nft
   * then caches the whole table instead of keeping a per-command chain list (see
   * `withWholeTableCache` in apply/iptables.ts). Absent: never.
   */
  readonly wholeTableCacheAbove?: number;
  /**
   * Declare every nat chain first, sorted by name (`KUBE-MARK-MASQ` last), then the rules — for
   * iptables-legacy, whose libiptc keeps chains in a sorted list and walks all of it every 355
   * new chains: chains created in name order lie in memory in list order, and 110,000 of them
   * load ~25% faster (10k×10 here). `KUBE-MARK-MASQ` last puts it first in xtables' bucket of
   * known chain names, where 110,000 `-j KUBE-MARK-MASQ` look it up. Every service port is
   * rendered once for its chain names before the first is sent, and again for its rules.
   * Only worth it where the chains are created: over existing ones (a re-sync) it is slower,
   * and iptables-nft is slower with it either way (measured), so the applier decides.
   */
  readonly sortedDeclarations?: boolean;
}

/** What was applied for one service port: its fixed-chain share and its chains' digests. */
interface AppliedPort {
  readonly shared: readonly SharedRule[];
  readonly clusterIP: string;
  readonly service: string;
  /** Its own chains, in order. */
  readonly names: readonly string[];
  /** The {@link digest} of each chain's rules, as {@link names}; the rules are not kept. */
  readonly digests: Float64Array;
}

interface Applied {
  readonly optionsKey: string;
  /** Service ports in KUBE-SERVICES order. */
  readonly ports: Map<string, AppliedPort>;
  readonly fixed: FixedChains;
}

const TABLES: readonly Table[] = ["filter", "nat"];

/** Size of the pieces {@link IptablesSyncPlan.chunks} yields (characters, about). */
const CHUNK = 64 * 1024;

/** Plans the restore sections of one family. */
export class IptablesSyncer {
  #applied: Applied | null = null;

  /** Something was applied (the next plan may be partial). */
  get hasApplied(): boolean {
    return this.#applied !== null;
  }

  /** Forget what was applied: the next plan is a full sync. */
  reset(): void {
    this.#applied = null;
  }

  /** Plans the section that brings the family's tables to `input` for the given options. */
  plan(input: SyncInput, request: SyncRequest, options: IptablesRenderOptions): IptablesSyncPlan {
    const applied = this.#applied;
    const optionsKey = JSON.stringify(options);
    if (request.full || applied === null || applied.optionsKey !== optionsKey) {
      return this.#planFull(input, options, optionsKey);
    }
    return this.#planPartial(input, request.changed, options, applied);
  }

  /**
   * A full section, rendered service port by service port while it is consumed, never whole:
   * nat first (each port's chains declared and filled, then the fixed chains, whose rules are
   * kept, then leftovers deleted), then filter (its rules come from every port's share), then
   * the mangle canary. What it applied is recorded while rendering: each port's share of the
   * fixed chains and a digest per chain.
   */
  #planFull(
    input: SyncInput,
    options: IptablesRenderOptions,
    optionsKey: string,
  ): IptablesSyncPlan {
    const previous = this.#applied;
    const keys = [...input.services.keys()].sort();
    let rendered: Applied | null = null;
    let sentBytes = 0;
    const record = (applied: Applied | null) => {
      this.#applied = applied;
    };
    function* chunks(extras: SectionExtras = {}): Generator<string> {
      const ports = new Map<string, AppliedPort>();
      const declared = new Set<string>(FIXED_CHAINS.nat);
      let bytes = 0;
      let buffer = sectionHeader(options.family, true) + "\n*nat\n";
      const line = (text: string) => {
        buffer += text + "\n";
      };
      /** Hands on what is written so far once it is a piece's worth. */
      function* piece(): Generator<string> {
        if (buffer.length < CHUNK) return;
        bytes += buffer.length;
        yield buffer;
        buffer = "";
      }
      const sorted = extras.sortedDeclarations === true;
      if (sorted) {
        // Rendered twice, names first: holding the rules instead (~33 MB at 10k×10) took the
        // daemon's peak over 300 MiB.
        for (const key of keys) {
          const fragment = render(input, key, options);
          if (fragment === null) continue;
          for (const name of fragment.chains.keys()) declared.add(name);
          ports.set(key, appliedPort(fragment));
        }
        const names = [...declared].filter((name) => name !== NAT.markMasq).sort();
        for (const name of [...names, NAT.markMasq]) {
          line(`:${name} - [0:0]`);
          yield* piece();
        }
      } else {
        for (const chain of FIXED_CHAINS.nat) line(`:${chain} - [0:0]`);
      }
      for (const rule of extras.first?.nat ?? []) line(rule);
      if (extras.wholeTableCacheAbove !== undefined) {
        let chains = keys.length;
        for (const key of keys) chains += input.endpoints.get(key)?.length ?? 0;
        if (chains > extras.wholeTableCacheAbove) line("-S");
      }
      for (const key of keys) {
        const fragment = render(input, key, options);
        if (fragment === null) continue;
        if (!sorted) {
          for (const name of fragment.chains.keys()) {
            line(`:${name} - [0:0]`);
            declared.add(name);
          }
          ports.set(key, appliedPort(fragment));
        }
        for (const rules of fragment.chains.values()) for (const rule of rules) line(rule);
        yield* piece();
      }
      const fixed = renderFixedChains(ports.values(), options);
      for (const rules of fixed.nat.values()) {
        for (const rule of rules) line(rule);
        yield* piece();
      }
      const stale = new Set(extras.stale?.(declared) ?? []);
      for (const port of previous?.ports.values() ?? []) {
        for (const name of port.names) if (!declared.has(name)) stale.add(name);
      }
      for (const name of stale) line(`:${name} - [0:0]`);
      for (const name of stale) line(`-X ${name}`);
      buffer += "COMMIT\n";
      buffer += renderTable({
        table: "filter",
        declare: FIXED_CHAINS.filter,
        rules: [...(extras.first?.filter ?? []), ...[...fixed.filter.values()].flat()],
      });
      buffer += renderTable({ table: "mangle", declare: [CANARY], rules: [] });
      bytes += buffer.length;
      yield buffer;
      rendered = { optionsKey, ports, fixed };
      sentBytes = bytes;
    }
    let script: string | undefined;
    return {
      get script() {
        return script ??= [...chunks()].join("");
      },
      get sentBytes() {
        return sentBytes;
      },
      full: true,
      fresh: previous === null,
      servicePortsChanged:
        keys.filter((key) =>
          input.services.get(key)!.clusterIPs.some((ip) => familyOf(ip) === options.family)
        ).length,
      chunks,
      commit: () => {
        if (rendered === null) drain(chunks());
        record(rendered);
      },
    };
  }

  #planPartial(
    input: SyncInput,
    changed: ReadonlySet<string>,
    options: IptablesRenderOptions,
    applied: Applied,
  ): IptablesSyncPlan {
    const replaced = new Map<string, { fragment: Fragment; port: AppliedPort } | null>();
    for (const key of changed) {
      const fragment = render(input, key, options);
      const port = fragment === null ? null : appliedPort(fragment);
      if (!samePort(applied.ports.get(key) ?? null, port)) {
        replaced.set(key, fragment === null ? null : { fragment, port: port! });
      }
    }
    if (replaced.size === 0) return partialPlan("", 0, () => {});
    // The fixed chains are re-assembled (O(all service ports)) only when a changed port's
    // share of them changed: an endpoint change leaves them alone.
    const reassemble = [...replaced].some(([key, now]) =>
      !sameShare(applied.ports.get(key) ?? null, now?.port ?? null)
    );
    let ports = applied.ports;
    let fixed = applied.fixed;
    const declare: Record<Table, string[]> = { filter: [], nat: [] };
    const rules: Record<Table, string[]> = { filter: [], nat: [] };
    if (reassemble) {
      ports = new Map(applied.ports);
      for (const [key, now] of replaced) {
        if (now) ports.set(key, now.port);
        else ports.delete(key);
      }
      fixed = renderFixedChains(ports.values(), options);
      for (const table of TABLES) {
        for (const [chain, wanted] of fixed[table]) {
          if (sameRules(applied.fixed[table].get(chain) ?? [], wanted)) continue;
          declare[table].push(chain);
          rules[table].push(...wanted);
        }
      }
    }
    const stale: string[] = [];
    for (const [key, now] of replaced) {
      const before = applied.ports.get(key) ?? null;
      const after = now?.port ?? null;
      for (const [name, wanted] of now?.fragment.chains ?? []) {
        const had = digestOf(before, name);
        if (had !== undefined && had === digestOf(after, name)) continue;
        declare.nat.push(name);
        rules.nat.push(...wanted);
      }
      for (const name of before?.names ?? []) {
        if (digestOf(after, name) === undefined) stale.push(name);
      }
    }
    const script = sectionHeader(options.family, false) + "\n" +
      renderTable({ table: "filter", declare: declare.filter, rules: rules.filter }) +
      renderTable({
        table: "nat",
        declare: [...declare.nat, ...stale],
        rules: rules.nat,
        trailer: stale.map((name) => `-X ${name}`),
      });
    return partialPlan(script, replaced.size, () => {
      if (ports === applied.ports) {
        // Same keys, same order: replace the changed ports in place.
        for (const [key, now] of replaced) ports.set(key, now!.port);
      }
      this.#applied = { optionsKey: applied.optionsKey, ports, fixed };
    });
  }
}

/** Renders a whole section into nothing (to record what it applies). */
function drain(chunks: Iterable<string>): void {
  for (const chunk of chunks) chunk.length;
}

function partialPlan(script: string, changed: number, commit: () => void): IptablesSyncPlan {
  return {
    script,
    sentBytes: script.length,
    full: false,
    fresh: false,
    servicePortsChanged: changed,
    chunks: function* () {
      if (script !== "") yield script;
    },
    commit,
  };
}

function render(input: SyncInput, key: string, options: IptablesRenderOptions): Fragment | null {
  const port: ServicePort | undefined = input.services.get(key);
  if (port === undefined) return null;
  return renderServicePort(port, input.endpoints.get(key) ?? [], options);
}

function appliedPort(fragment: Fragment): AppliedPort {
  const names = [...fragment.chains.keys()];
  const digests = new Float64Array(names.length);
  names.forEach((name, i) => digests[i] = digest(fragment.chains.get(name)!));
  // Kept for every port: flattened, without the pieces they were concatenated from.
  for (const { rule } of fragment.shared) rule.charCodeAt(0);
  return {
    shared: fragment.shared,
    clusterIP: fragment.clusterIP,
    service: fragment.service,
    names,
    digests,
  };
}

/** The digest of one of a port's chains, or undefined when it has no such chain. */
function digestOf(port: AppliedPort | null, name: string): number | undefined {
  const i = port === null ? -1 : port.names.indexOf(name);
  return i < 0 ? undefined : port!.digests[i];
}

/**
 * A 53-bit digest of a chain's rules (two 32-bit multiplicative hashes of the text, with its
 * length folded in), kept instead of the rules: like upstream's per-chain hashes, it tells
 * whether a chain must be rewritten, for a fraction of the memory.
 */
export function digest(rules: readonly string[]): number {
  let a = 0x811c9dc5;
  let b = rules.length;
  for (const rule of rules) {
    for (let i = 0; i < rule.length; i++) {
      const c = rule.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
    }
    a = Math.imul(a ^ 10, 0x01000193);
    b = Math.imul(b ^ rule.length, 0x5bd1e995);
  }
  return (a >>> 0) * 0x200000 + ((b >>> 0) & 0x1fffff);
}

function sameRules(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((rule, i) => rule === b[i]);
}

/** Same rules in the fixed chains and same cluster IP (a removed or added port never is). */
function sameShare(a: AppliedPort | null, b: AppliedPort | null): boolean {
  if (a === null || b === null) return false;
  if (a.clusterIP !== b.clusterIP || a.service !== b.service) return false;
  return a.shared.length === b.shared.length &&
    a.shared.every((r, i) => r.rule === b.shared[i].rule && r.table === b.shared[i].table);
}

function samePort(a: AppliedPort | null, b: AppliedPort | null): boolean {
  if (a === null || b === null) return a === b;
  if (!sameShare(a, b) || a.names.length !== b.names.length) return false;
  return a.names.every((name, i) => name === b.names[i] && a.digests[i] === b.digests[i]);
}
