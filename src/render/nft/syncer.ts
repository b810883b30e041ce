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
 * Elements can be wanted by several service ports at once (two services sharing an external
 * IP add the same `cluster-ips`-style element): they are reference-counted, and the first
 * owner's value wins when two owners disagree, so a script never adds a key twice.
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
import { type ElementDef, Transaction } from "./transaction.ts";

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

type Owners = Map<string, ElementDef>;

interface Applied {
  readonly optionsKey: string;
  readonly fragments: Map<string, Fragment>;
  readonly elements: Map<string, Owners>;
}

/** Plans the transactions of one nft family. */
export class NftSyncer {
  #applied: Applied | null = null;

  /** Forget what was applied: the next plan is a first (table-recreating) full sync. */
  reset(): void {
    this.#applied = null;
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
    const elements = new Map<string, Owners>();
    for (const [key, fragment] of fragments) addOwner(elements, key, fragment);

    declareSkeleton(tx, skeleton, previous !== null);
    for (const fragment of fragments.values()) {
      for (const name of fragment.chains.keys()) tx.addChain({ name }).flushChain(name);
    }
    for (const { def, rules } of skeleton.chains) rules.forEach((r) => tx.addRule(def.name, r));
    for (const fragment of fragments.values()) {
      for (const [name, rules] of fragment.chains) rules.forEach((r) => tx.addRule(name, r));
    }
    addActiveElements(tx, elements.values());
    if (previous !== null) {
      const stale = staleChains(previous.fragments.values(), fragments);
      stale.forEach((name) => tx.flushChain(name));
      stale.forEach((name) => tx.deleteChain(name));
    }
    return {
      script: tx.toString(),
      full: true,
      servicePortsChanged: fragments.size,
      commit: () => {
        this.#applied = { optionsKey, fragments, elements };
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
      if (fragment !== null || applied.fragments.has(key)) replaced.set(key, fragment);
    }
    // Chains: add new ones, rewrite changed ones, delete vanished ones (last).
    const deleted: string[] = [];
    let servicePortsChanged = 0;
    for (const [key, fragment] of replaced) {
      const before = applied.fragments.get(key)?.chains ?? new Map<string, readonly string[]>();
      const after = fragment?.chains ?? new Map<string, readonly string[]>();
      let touched = false;
      for (const [name, rules] of after) {
        const old = before.get(name);
        if (old !== undefined && sameRules(old, rules)) continue;
        tx.addChain({ name });
        if (old !== undefined) tx.flushChain(name);
        rules.forEach((r) => tx.addRule(name, r));
        touched = true;
      }
      for (const name of before.keys()) {
        if (!after.has(name)) {
          deleted.push(name);
          touched = true;
        }
      }
      if (touched) servicePortsChanged++;
    }
    // Elements: simulate the owner changes on copies of the affected entries.
    const overlay = new Map<string, Owners>();
    const ownersOf = (id: string): Owners => {
      let owners = overlay.get(id);
      if (owners === undefined) overlay.set(id, owners = new Map(applied.elements.get(id)));
      return owners;
    };
    for (const [key, fragment] of replaced) {
      for (const e of applied.fragments.get(key)?.elements ?? []) {
        ownersOf(elementId(e)).delete(key);
      }
      for (const e of fragment?.elements ?? []) ownersOf(elementId(e)).set(key, e);
    }
    const removals = new Map<string, string[]>();
    const additions: ElementDef[] = [];
    for (const [id, owners] of overlay) {
      const before = first(applied.elements.get(id));
      const after = first(owners);
      if (sameElement(before, after)) continue;
      if (before) pushTo(removals, before.set, before.key);
      if (after) additions.push(after);
    }
    for (const [set, keys] of removals) tx.deleteElements(set, keys);
    addActiveElements(tx, additions.map((e) => new Map([["", e]])));
    deleted.forEach((name) => tx.flushChain(name));
    deleted.forEach((name) => tx.deleteChain(name));
    if (removals.size > 0 || additions.length > 0) servicePortsChanged ||= replaced.size;
    return {
      script: tx.toString(),
      full: false,
      servicePortsChanged,
      commit: () => {
        for (const [key, fragment] of replaced) {
          if (fragment) applied.fragments.set(key, fragment);
          else applied.fragments.delete(key);
        }
        for (const [id, owners] of overlay) {
          if (owners.size > 0) applied.elements.set(id, owners);
          else applied.elements.delete(id);
        }
      },
    };
  }
}

/** Declares the skeleton's sets and chains; on a re-assert, empties sets and chains first. */
function declareSkeleton(tx: Transaction, skeleton: Skeleton, reassert: boolean): void {
  for (const set of skeleton.sets) {
    tx.addSet(set);
    if (reassert) tx.flushSet(set.kind, set.name);
  }
  for (const { def } of skeleton.chains) {
    tx.addChain(def);
    if (reassert) tx.flushChain(def.name);
  }
}

function addOwner(elements: Map<string, Owners>, owner: string, fragment: Fragment): void {
  for (const e of fragment.elements) {
    const id = elementId(e);
    let owners = elements.get(id);
    if (owners === undefined) elements.set(id, owners = new Map());
    owners.set(owner, e);
  }
}

/** Adds the active (first-owner) element of each entry, grouped by set. */
function addActiveElements(tx: Transaction, entries: Iterable<Owners>): void {
  const bySet = new Map<string, ElementDef[]>();
  for (const owners of entries) {
    const e = first(owners);
    if (e) pushTo(bySet, e.set, e);
  }
  for (const [set, elements] of bySet) tx.addElements(set, elements);
}

function staleChains(before: Iterable<Fragment>, after: Map<string, Fragment>): string[] {
  const wanted = new Set<string>();
  for (const fragment of after.values()) {
    for (const name of fragment.chains.keys()) wanted.add(name);
  }
  const stale: string[] = [];
  for (const fragment of before) {
    for (const name of fragment.chains.keys()) if (!wanted.has(name)) stale.push(name);
  }
  return stale;
}

function elementId(e: ElementDef): string {
  return `${e.set}\u0000${e.key}`;
}

function first(owners: Owners | undefined): ElementDef | undefined {
  if (owners === undefined) return undefined;
  for (const e of owners.values()) return e;
  return undefined;
}

function sameElement(a: ElementDef | undefined, b: ElementDef | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.value === b.value && a.comment === b.comment;
}

function sameRules(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((r, i) => r === b[i]);
}

function pushTo<T>(map: Map<string, T[]>, key: string, value: T): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
