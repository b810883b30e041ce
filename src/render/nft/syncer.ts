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

/** Owner (service port key) → what it wants, in insertion order; the first one is in force. */
type Owners<T> = Map<string, T>;

interface Applied {
  readonly optionsKey: string;
  readonly skeleton: Skeleton;
  readonly fragments: Map<string, Fragment>;
  readonly sets: Map<string, Owners<SetDef>>;
  readonly chains: Map<string, Owners<readonly string[]>>;
  readonly elements: Map<string, Owners<ElementDef>>;
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
    for (const owners of applied.elements.values()) {
      const e = first(owners);
      if (e?.set === NAMES.affinityServices) targets.set(e.key, new Set());
    }
    for (const owners of applied.elements.values()) {
      const e = first(owners);
      if (e === undefined || e.value === undefined || !/-endpoints-/.test(e.set)) continue;
      const entry = e.key.slice(0, e.key.lastIndexOf(" . "));
      targets.get(entry)?.add(e.value);
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
    const sets = new Map<string, Owners<SetDef>>();
    const chains = new Map<string, Owners<readonly string[]>>();
    const elements = new Map<string, Owners<ElementDef>>();
    for (const [key, fragment] of fragments) addOwner({ sets, chains, elements }, key, fragment);

    for (const set of [...skeleton.sets, ...[...sets.values()].map((o) => first(o)!)]) {
      tx.addSet(set);
      if (previous !== null && !set.dynamic) tx.flushSet(set.kind, set.name);
    }
    for (const { def } of skeleton.chains) {
      tx.addChain(def);
      if (previous !== null) tx.flushChain(def.name);
    }
    for (const name of chains.keys()) {
      tx.addChain({ name });
      if (previous?.chains.has(name)) tx.flushChain(name);
    }
    for (const { def, rules } of skeleton.chains) rules.forEach((r) => tx.addRule(def.name, r));
    for (const [name, owners] of chains) first(owners)!.forEach((r) => tx.addRule(name, r));
    addElements(tx, [...skeleton.elements, ...[...elements.values()].map(first)]);
    if (previous !== null) {
      deleteChains(tx, [...previous.chains.keys()].filter((name) => !chains.has(name)));
      for (const [name, owners] of previous.sets) {
        if (!sets.has(name)) tx.deleteSet(first(owners)!.kind, name);
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
    // Simulate the owner changes on copies of the affected entries only.
    const setOverlay = new Map<string, Owners<SetDef>>();
    const chainOverlay = new Map<string, Owners<readonly string[]>>();
    const elementOverlay = new Map<string, Owners<ElementDef>>();
    const copy = <T>(overlay: Map<string, Owners<T>>, from: Map<string, Owners<T>>, id: string) => {
      let owners = overlay.get(id);
      if (owners === undefined) overlay.set(id, owners = new Map(from.get(id)));
      return owners;
    };
    for (const [key, fragment] of replaced) {
      const before = applied.fragments.get(key);
      for (const name of before?.chains.keys() ?? []) {
        copy(chainOverlay, applied.chains, name).delete(key);
      }
      for (const e of before?.elements ?? []) {
        copy(elementOverlay, applied.elements, elementId(e)).delete(key);
      }
      for (const [name, rules] of fragment?.chains ?? []) {
        copy(chainOverlay, applied.chains, name).set(key, rules);
      }
      for (const e of fragment?.elements ?? []) {
        copy(elementOverlay, applied.elements, elementId(e)).set(key, e);
      }
    }
    // Chains first (elements may point at new ones), deletions last (after the elements and
    // rules that pointed at them are gone).
    const deletedSets: SetDef[] = [];
    for (const [name, owners] of setOverlay) {
      const before = first(applied.sets.get(name));
      const after = first(owners);
      if (after !== undefined && before === undefined) tx.addSet(after);
      if (after === undefined && before !== undefined) deletedSets.push(before);
    }
    const deleted: string[] = [];
    for (const [name, owners] of chainOverlay) {
      const before = first(applied.chains.get(name));
      const after = first(owners);
      if (after === undefined) {
        if (before !== undefined) deleted.push(name);
        continue;
      }
      if (before !== undefined && sameRules(before, after)) continue;
      tx.addChain({ name });
      if (before !== undefined) tx.flushChain(name);
      after.forEach((r) => tx.addRule(name, r));
    }
    const removals = new Map<string, string[]>();
    const additions: ElementDef[] = [];
    for (const [id, owners] of elementOverlay) {
      const before = first(applied.elements.get(id));
      const after = first(owners);
      if (sameElement(before, after)) continue;
      if (before) pushTo(removals, before.set, before.key);
      if (after) additions.push(after);
    }
    for (const [set, keys] of removals) tx.deleteElements(set, keys);
    addElements(tx, additions);
    deleteChains(tx, deleted);
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
        mergeOverlay(applied.sets, setOverlay);
        mergeOverlay(applied.chains, chainOverlay);
        mergeOverlay(applied.elements, elementOverlay);
      },
    };
  }
}

function addOwner(
  into: {
    sets: Map<string, Owners<SetDef>>;
    chains: Map<string, Owners<readonly string[]>>;
    elements: Map<string, Owners<ElementDef>>;
  },
  owner: string,
  fragment: Fragment,
): void {
  const { sets, chains, elements } = into;
  for (const [name, set] of fragment.sets ?? []) {
    let owners = sets.get(name);
    if (owners === undefined) sets.set(name, owners = new Map());
    owners.set(owner, set);
  }
  for (const [name, rules] of fragment.chains) {
    let owners = chains.get(name);
    if (owners === undefined) chains.set(name, owners = new Map());
    owners.set(owner, rules);
  }
  for (const e of fragment.elements) {
    const id = elementId(e);
    let owners = elements.get(id);
    if (owners === undefined) elements.set(id, owners = new Map());
    owners.set(owner, e);
  }
}

function mergeOverlay<T>(target: Map<string, Owners<T>>, overlay: Map<string, Owners<T>>): void {
  for (const [id, owners] of overlay) {
    if (owners.size > 0) target.set(id, owners);
    else target.delete(id);
  }
}

/** Adds elements grouped by set. */
function addElements(tx: Transaction, elements: readonly (ElementDef | undefined)[]): void {
  const bySet = new Map<string, ElementDef[]>();
  for (const e of elements) if (e) pushTo(bySet, e.set, e);
  for (const [set, list] of bySet) tx.addElements(set, list);
}

/** Empties, then deletes chains (a chain's rules may jump to another chain being deleted). */
function deleteChains(tx: Transaction, names: readonly string[]): void {
  names.forEach((name) => tx.flushChain(name));
  names.forEach((name) => tx.deleteChain(name));
}

function elementId(e: ElementDef): string {
  return `${e.set}\u0000${e.key}`;
}

function first<T>(owners: Owners<T> | undefined): T | undefined {
  if (owners === undefined) return undefined;
  for (const value of owners.values()) return value;
  return undefined;
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

function pushTo<T>(map: Map<string, T[]>, key: string, value: T): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
