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
import type { ServicePort } from "../../model/service_port.ts";
import type { SyncInput, SyncRequest } from "../planner.ts";
import { CANARY, FIXED_CHAINS, type Table } from "./names.ts";
import type { IptablesRenderOptions } from "./options.ts";
import {
  type FixedChains,
  type Fragment,
  renderFixedChains,
  renderServicePort,
} from "./ruleset.ts";
import { renderTable, sectionHeader } from "./script.ts";

/** A planned family section; call {@link commit} once `iptables-restore` has accepted it. */
export interface IptablesSyncPlan {
  /** The section (header included), or "" when nothing is to change. */
  readonly script: string;
  readonly full: boolean;
  /** Number of service ports whose rules the plan changes. */
  readonly servicePortsChanged: number;
  /** Records the plan as applied. */
  commit(): void;
}

interface Applied {
  readonly optionsKey: string;
  /** Fragments in KUBE-SERVICES order. */
  readonly fragments: Map<string, Fragment>;
  readonly fixed: FixedChains;
}

const TABLES: readonly Table[] = ["filter", "nat"];

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

  #planFull(
    input: SyncInput,
    options: IptablesRenderOptions,
    optionsKey: string,
  ): IptablesSyncPlan {
    const previous = this.#applied;
    const fragments = new Map<string, Fragment>();
    for (const key of [...input.services.keys()].sort()) {
      const fragment = render(input, key, options);
      if (fragment) fragments.set(key, fragment);
    }
    const fixed = renderFixedChains(fragments.values(), options);
    const serviceChains = new Set<string>();
    const natDeclare = [...FIXED_CHAINS.nat];
    const natRules = [...fixed.nat.values()].flat();
    for (const fragment of fragments.values()) {
      for (const [name, rules] of fragment.chains) {
        serviceChains.add(name);
        natDeclare.push(name);
        for (const rule of rules) natRules.push(rule);
      }
    }
    const stale: string[] = [];
    for (const fragment of previous?.fragments.values() ?? []) {
      for (const name of fragment.chains.keys()) if (!serviceChains.has(name)) stale.push(name);
    }
    const script = sectionHeader(options.family, true) + "\n" +
      renderTable({
        table: "filter",
        declare: FIXED_CHAINS.filter,
        rules: [...fixed.filter.values()].flat(),
      }) +
      renderTable({
        table: "nat",
        declare: [...natDeclare, ...stale],
        rules: natRules,
        trailer: stale.map((name) => `-X ${name}`),
      }) +
      renderTable({ table: "mangle", declare: [CANARY], rules: [] });
    return {
      script,
      full: true,
      servicePortsChanged: fragments.size,
      commit: () => {
        this.#applied = { optionsKey, fragments, fixed };
      },
    };
  }

  #planPartial(
    input: SyncInput,
    changed: ReadonlySet<string>,
    options: IptablesRenderOptions,
    applied: Applied,
  ): IptablesSyncPlan {
    const replaced = new Map<string, Fragment | null>();
    for (const key of changed) {
      const fragment = render(input, key, options);
      if (!sameFragment(applied.fragments.get(key) ?? null, fragment)) replaced.set(key, fragment);
    }
    if (replaced.size === 0) {
      return { script: "", full: false, servicePortsChanged: 0, commit: () => {} };
    }
    // The fixed chains are re-assembled (O(all service ports)) only when a changed port's
    // share of them changed: an endpoint change leaves them alone.
    const reassemble = [...replaced].some(([key, fragment]) =>
      !sameShare(applied.fragments.get(key) ?? null, fragment)
    );
    let fragments = applied.fragments;
    let fixed = applied.fixed;
    const declare: Record<Table, string[]> = { filter: [], nat: [] };
    const rules: Record<Table, string[]> = { filter: [], nat: [] };
    if (reassemble) {
      fragments = new Map(applied.fragments);
      for (const [key, fragment] of replaced) {
        if (fragment) fragments.set(key, fragment);
        else fragments.delete(key);
      }
      fixed = renderFixedChains(fragments.values(), options);
      for (const table of TABLES) {
        for (const [chain, wanted] of fixed[table]) {
          if (sameRules(applied.fixed[table].get(chain) ?? [], wanted)) continue;
          declare[table].push(chain);
          rules[table].push(...wanted);
        }
      }
    }
    const stale: string[] = [];
    for (const [key, fragment] of replaced) {
      const before = applied.fragments.get(key)?.chains ?? new Map<string, readonly string[]>();
      const after = fragment?.chains ?? new Map<string, readonly string[]>();
      for (const [name, wanted] of after) {
        const had = before.get(name);
        if (had !== undefined && sameRules(had, wanted)) continue;
        declare.nat.push(name);
        rules.nat.push(...wanted);
      }
      for (const name of before.keys()) if (!after.has(name)) stale.push(name);
    }
    const script = sectionHeader(options.family, false) + "\n" +
      renderTable({ table: "filter", declare: declare.filter, rules: rules.filter }) +
      renderTable({
        table: "nat",
        declare: [...declare.nat, ...stale],
        rules: rules.nat,
        trailer: stale.map((name) => `-X ${name}`),
      });
    return {
      script,
      full: false,
      servicePortsChanged: replaced.size,
      commit: () => {
        if (fragments === applied.fragments) {
          // Same keys, same order: replace the changed ports' fragments in place.
          for (const [key, fragment] of replaced) fragments.set(key, fragment!);
        }
        this.#applied = { optionsKey: applied.optionsKey, fragments, fixed };
      },
    };
  }
}

function render(input: SyncInput, key: string, options: IptablesRenderOptions): Fragment | null {
  const port: ServicePort | undefined = input.services.get(key);
  if (port === undefined) return null;
  return renderServicePort(port, input.endpoints.get(key) ?? [], options);
}

function sameRules(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((rule, i) => rule === b[i]);
}

/** Same rules in the fixed chains and same cluster IP (a removed or added port never is). */
function sameShare(a: Fragment | null, b: Fragment | null): boolean {
  if (a === null || b === null) return false;
  if (a.clusterIP !== b.clusterIP || a.service !== b.service) return false;
  return a.shared.length === b.shared.length &&
    a.shared.every((r, i) => r.rule === b.shared[i].rule && r.table === b.shared[i].table);
}

function sameFragment(a: Fragment | null, b: Fragment | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.clusterIP !== b.clusterIP || a.service !== b.service) return false;
  if (a.shared.length !== b.shared.length || a.chains.size !== b.chains.size) return false;
  if (!a.shared.every((r, i) => r.rule === b.shared[i].rule && r.table === b.shared[i].table)) {
    return false;
  }
  for (const [name, rules] of a.chains) {
    const other = b.chains.get(name);
    if (other === undefined || !sameRules(rules, other)) return false;
  }
  return true;
}
