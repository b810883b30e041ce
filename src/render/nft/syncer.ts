/**
 * Sync planning for nft: turns the proxy state and the set of changed service ports into the
 * one transaction that brings a table from what was last applied to what is wanted now.
 *
 * Pure (no I/O): it remembers what it planned, and that memory advances only when the caller
 * reports the plan applied ({@link SyncPlan.commit}). A partial plan touches only the chains and
 * elements of changed service ports; a plan with no change is empty. A full plan re-asserts
 * everything; the first one (kernel state unknown) deletes and recreates the table inside the
 * same transaction, so there is never a moment without rules.
 *
 * Chains and elements can be wanted by several service ports at once (every service with three
 * endpoints uses the chain `lb-3`; two services sharing an endpoint add the same hairpin
 * element): they are reference-counted by owner, and the first owner's content wins when two
 * owners disagree, so a script never adds a key twice. A chain is created when its first owner
 * appears and deleted, last in the transaction, when its last owner goes.
 *
 * @module
 */
import type { Endpoint } from "../../model/endpoint.ts";
import type { ServicePort } from "../../model/service_port.ts";
import {
  type Fragment,
  type NftRenderOptions,
  renderServicePort,
  renderSkeleton,
  type Skeleton,
} from "./ruleset.ts";
import { type ElementDef, type SetDef, Transaction } from "./transaction.ts";
import { OwnedIndex, type OwnerChanges } from "./owned_index.ts";
import { NAMES } from "./names.ts";

/** The state a plan is computed from. */
export interface SyncInput {
  readonly services: ReadonlyMap<string, ServicePort>;
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
}

/** Which service ports to re-render, or everything. */
export interface SyncRequest {
  /** Re-render and re-assert everything. */
  readonly full: boolean;
  /** Service port keys to re-render in a partial sync. */
  readonly changed: ReadonlySet<string>;
}

/** A planned transaction; call {@link commit} once `nft` has accepted it. */
export interface SyncPlan {
  /** The script for `nft -f`; empty when nothing is to change. */
  readonly script: string;
  /** The plan re-asserts the whole table. */
  readonly full: boolean;
  /** Number of service ports whose chains or elements the plan changes. */
  readonly servicePortsChanged: number;
  /** Records the plan as applied. */
  commit(): void;
}

const TABLE_COMMENT = "rules for kube-nftproxy";

interface Applied {
  readonly optionsKey: string;
  readonly skeleton: Skeleton;
  readonly fragments: Map<string, Fragment>;
  readonly sets: OwnedIndex<SetDef>;
  readonly chains: OwnedIndex<readonly string[]>;
  /** Element owners per set name, keyed by element key. */
  readonly elements: Map<string, OwnedIndex<ElementDef>>;
}

/** Plans the transactions of one nft family. */
export class NftSyncer {
  #applied: Applied | null = null;

  /** Forget what was applied: the next plan is a first (table-recreating) full sync. */
  reset(): void {
    this.#applied = null;
  }

  /**
   * For every entry point with ClientIP affinity in the shared `affinity` map (IPv4), the
   * endpoints (`addr . port`) it may stick to, as last applied. Entries recorded for any other
   * endpoint are stale: the endpoint went away.
   */
  affinityTargets(): Map<string, Set<string>> {
    const targets = new Map<string, Set<string>>();
    const applied = this.#applied;
    if (applied === null) return targets;
    for (const [key] of applied.elements.get(NAMES.affinityServices)?.active() ?? []) {
      targets.set(key, new Set());
    }
    for (const [set, index] of applied.elements) {
      if (!/-endpoints-/.test(set)) continue;
      for (const [key, e] of index.active()) {
        if (e.value !== undefined) targets.get(key.slice(0, key.lastIndexOf(" . ")))?.add(e.value);
      }
    }
    return targets;
  }

  /** Plans the transaction that brings the table to `input` for the given options. */
  plan(input: SyncInput, request: SyncRequest, options: NftRenderOptions): SyncPlan {
    const applied = this.#applied;
    const optionsKey = JSON.stringify(options);
    if (request.full || applied === null || applied.optionsKey !== optionsKey) {
      return this.#planFull(input, options, optionsKey);
    }
    return this.#planPartial(input, request.changed, options, applied);
  }

  #planFull(input: SyncInput, options: NftRenderOptions, optionsKey: string): SyncPlan {
    const previous = this.#applied;
    const tx = new Transaction(options.family, options.table).addTable(TABLE_COMMENT);
    if (previous === null) tx.deleteTable().addTable(TABLE_COMMENT);
    const skeleton = renderSkeleton(options);
    const fragments = new Map<string, Fragment>();
    for (const [key, port] of input.services) {
      const fragment = renderServicePort(port, input.endpoints.get(key) ?? [], options);
      if (fragment) fragments.set(key, fragment);
    }
    const sets = new OwnedIndex<SetDef>();
    const chains = new OwnedIndex<readonly string[]>();
    const elements = new Map<string, OwnedIndex<ElementDef>>();
    for (const [owner, fragment] of fragments) {
      for (const [name, set] of fragment.sets ?? []) sets.add(name, owner, set);
      for (const [name, rules] of fragment.chains) chains.add(name, owner, rules);
      for (const e of fragment.elements) indexOf(elements, e.set).add(e.key, owner, e);
    }

    for (const set of [...skeleton.sets, ...[...sets.active()].map(([, set]) => set)]) {
      tx.addSet(set);
      if (previous !== null && !set.dynamic) tx.flushSet(set.kind, set.name);
    }
    for (const { def } of skeleton.chains) {
      tx.addChain(def);
      if (previous !== null) tx.flushChain(def.name);
    }
    for (const [name] of chains.active()) {
      tx.addChain({ name });
      if (previous?.chains.has(name)) tx.flushChain(name);
    }
    for (const { def, rules } of skeleton.chains) rules.forEach((r) => tx.addRule(def.name, r));
    for (const [name, rules] of chains.active()) rules.forEach((r) => tx.addRule(name, r));
    if (skeleton.elements.length > 0) addElements(tx, skeleton.elements);
    for (const [set, index] of elements) tx.addElements(set, [...index.active()].map(([, e]) => e));
    if (previous !== null) {
      deleteChains(tx, [...previous.chains.active()].map(([n]) => n).filter((n) => !chains.has(n)));
      for (const [name, set] of previous.sets.active()) {
        if (!sets.has(name)) tx.deleteSet(set.kind, name);
      }
    }
    return {
      script: tx.toString(),
      full: true,
      servicePortsChanged: fragments.size,
      commit: () => {
        this.#applied = { optionsKey, skeleton, fragments, sets, chains, elements };
      },
    };
  }

  #planPartial(
    input: SyncInput,
    changed: ReadonlySet<string>,
    options: NftRenderOptions,
    applied: Applied,
  ): SyncPlan {
    const tx = new Transaction(options.family, options.table);
    const replaced = new Map<string, Fragment | null>();
    for (const key of changed) {
      const port = input.services.get(key);
      const fragment = port
        ? renderServicePort(port, input.endpoints.get(key) ?? [], options)
        : null;
      const before = applied.fragments.get(key) ?? null;
      if (!sameFragment(before, fragment)) replaced.set(key, fragment);
    }
    // Record who stops and starts owning what; nothing is copied or changed until commit.
    const setChanges = new Changes<SetDef>();
    const chainChanges = new Changes<readonly string[]>();
    const elementChanges = new Map<string, Changes<ElementDef>>();
    const elementChangesOf = (set: string) => {
      let changes = elementChanges.get(set);
      if (changes === undefined) elementChanges.set(set, changes = new Changes());
      return changes;
    };
    for (const [owner, fragment] of replaced) {
      const before = applied.fragments.get(owner);
      for (const name of before?.sets?.keys() ?? []) setChanges.remove(name, owner);
      for (const name of before?.chains.keys() ?? []) chainChanges.remove(name, owner);
      for (const e of before?.elements ?? []) elementChangesOf(e.set).remove(e.key, owner);
      for (const [name, set] of fragment?.sets ?? []) setChanges.add(name, owner, set);
      for (const [name, rules] of fragment?.chains ?? []) chainChanges.add(name, owner, rules);
      for (const e of fragment?.elements ?? []) elementChangesOf(e.set).add(e.key, owner, e);
    }
    // Sets and chains first (elements and rules may point at new ones); deletions last, after
    // the elements and rules that pointed at them are gone.
    const deletedSets: SetDef[] = [];
    for (const [name, changes] of setChanges.byId) {
      const before = applied.sets.get(name);
      const after = applied.sets.after(name, changes);
      if (after !== undefined && before === undefined) tx.addSet(after);
      if (after === undefined && before !== undefined) deletedSets.push(before);
    }
    const deletedChains: string[] = [];
    const rewritten: [string, readonly string[]][] = [];
    for (const [name, changes] of chainChanges.byId) {
      const before = applied.chains.get(name);
      const after = applied.chains.after(name, changes);
      if (after === undefined) {
        if (before !== undefined) deletedChains.push(name);
        continue;
      }
      if (before !== undefined && sameRules(before, after)) continue;
      // Every new chain exists before any rule is written: a rewritten chain may jump to one.
      if (before === undefined) tx.addChain({ name });
      rewritten.push([name, after]);
    }
    for (const [name, rules] of rewritten) {
      if (applied.chains.has(name)) tx.flushChain(name);
      rules.forEach((r) => tx.addRule(name, r));
    }
    const additions: ElementDef[] = [];
    for (const [set, changes] of elementChanges) {
      const index = applied.elements.get(set) ?? new OwnedIndex<ElementDef>();
      const removals: string[] = [];
      for (const [key, change] of changes.byId) {
        const before = index.get(key);
        const after = index.after(key, change);
        if (sameElement(before, after)) continue;
        if (before) removals.push(before.key);
        if (after) additions.push(after);
      }
      if (removals.length > 0) tx.deleteElements(set, removals);
    }
    addElements(tx, additions);
    deleteChains(tx, deletedChains);
    deletedSets.forEach((set) => tx.deleteSet(set.kind, set.name));
    return {
      script: tx.toString(),
      full: false,
      servicePortsChanged: replaced.size,
      commit: () => {
        for (const [key, fragment] of replaced) {
          if (fragment) applied.fragments.set(key, fragment);
          else applied.fragments.delete(key);
        }
        setChanges.applyTo(applied.sets);
        chainChanges.applyTo(applied.chains);
        for (const [set, changes] of elementChanges) {
          changes.applyTo(indexOf(applied.elements, set));
        }
      },
    };
  }
}

/** Ownership changes of many ids, recorded during a partial plan. */
class Changes<T> {
  readonly byId = new Map<string, OwnerChanges<T>>();

  #of(id: string): OwnerChanges<T> {
    let changes = this.byId.get(id);
    if (changes === undefined) {
      this.byId.set(id, changes = { removed: new Set(), added: new Map() });
    }
    return changes;
  }

  remove(id: string, owner: string): void {
    this.#of(id).removed.add(owner);
  }

  add(id: string, owner: string, value: T): void {
    this.#of(id).added.set(owner, value);
  }

  applyTo(index: OwnedIndex<T>): void {
    for (const [id, changes] of this.byId) index.apply(id, changes);
  }
}

function indexOf(
  elements: Map<string, OwnedIndex<ElementDef>>,
  set: string,
): OwnedIndex<ElementDef> {
  let index = elements.get(set);
  if (index === undefined) elements.set(set, index = new OwnedIndex());
  return index;
}

/** Adds elements grouped by set. */
function addElements(tx: Transaction, elements: readonly ElementDef[]): void {
  const bySet = new Map<string, ElementDef[]>();
  for (const e of elements) {
    const list = bySet.get(e.set);
    if (list) list.push(e);
    else bySet.set(e.set, [e]);
  }
  for (const [set, list] of bySet) tx.addElements(set, list);
}

/** Empties, then deletes chains (a chain's rules may jump to another chain being deleted). */
function deleteChains(tx: Transaction, names: readonly string[]): void {
  names.forEach((name) => tx.flushChain(name));
  names.forEach((name) => tx.deleteChain(name));
}

function sameElement(a: ElementDef | undefined, b: ElementDef | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.value === b.value && a.comment === b.comment;
}

function sameRules(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((r, i) => r === b[i]);
}

function sameFragment(a: Fragment | null, b: Fragment | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.elements.length !== b.elements.length || a.chains.size !== b.chains.size) return false;
  if (JSON.stringify([...a.sets ?? []]) !== JSON.stringify([...b.sets ?? []])) return false;
  for (const [name, rules] of a.chains) {
    const other = b.chains.get(name);
    if (other === undefined || !sameRules(rules, other)) return false;
  }
  return a.elements.every((e, i) => {
    const o = b.elements[i];
    return e.set === o.set && e.key === o.key && e.value === o.value && e.comment === o.comment;
  });
}
