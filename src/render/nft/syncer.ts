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
 * A full plan needs only each object's owner in force ({@link TableInForce}); who else owns it
 * is recorded from the remembered fragments when a partial plan first needs it, so a cold
 * start does not pay for the owner indexes (the first partial sync after it does, once).
 *
 * Elements stay the formatted lines the ruleset rendered. Owners are counted per key, except in
 * the endpoint maps (nine in ten elements): there per entry point (`addr . proto . port`), whose
 * elements `entry . 0`, `entry . 1`, … are in force as if counted per key — index `i` from the
 * first owner that has an `i`-th endpoint — so a render keeps no object per element. An entry
 * point's elements keep the state's endpoints and are written out when a script needs them, so
 * what is remembered of them is a pointer per endpoint, not their text.
 *
 * @module
 */
import type { Fragment, Skeleton } from "./fragment.ts";
import { NAMES } from "./names.ts";
import type { NftRenderOptions } from "./options.ts";
import { OwnedIndex } from "./owned_index.ts";
import {
  Changes,
  ElementChanges,
  inForce,
  type Owners,
  ownersOf,
  sameFragment,
  sameRules,
  sameSet,
  SharedChains,
} from "./ownership.ts";
import { TableInForce } from "./in_force.ts";
import { AffinityIds } from "./affinity.ts";
import { renderServicePort } from "./service_fragment.ts";
import { renderSkeleton } from "./skeleton.ts";
import { type ElementDef, type SetDef, Transaction } from "./transaction.ts";
import type { SyncInput, SyncRequest } from "../planner.ts";

/** A planned transaction; call {@link commit} once `nft` has accepted it. */
export interface SyncPlan {
  /**
   * The script for `nft -f`; empty when nothing is to change. Written out on each read, so a
   * plan kept until {@link commit} does not hold a full sync's megabytes of text.
   */
  readonly script: string;
  /** The commands of {@link script}, to write several plans' scripts out at once. */
  readonly transaction: Transaction;
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
  readonly sharedChains: SharedChains;
  readonly sets: OwnedIndex<SetDef>;
  /** The chains of the full plan, while {@link owners} is not built. */
  readonly fullChains: ReadonlySet<string>;
  /** Whether the full plan had an IPv4 affinity id, while {@link owners} is not built. */
  readonly affinity: boolean;
  /**
   * Every owner of every chain and element, built from {@link fragments} when first needed (a
   * partial plan, or affinity targets) and kept up to date by partial plans from then on.
   */
  owners: Owners | null;
}

/** The owners of what was applied (built on first use; see {@link Applied.owners}). */
function ownersOfApplied(applied: Applied): Owners {
  return applied.owners ??= ownersOf(applied.fragments);
}

/** The chains applied. */
function chainNamesOf(applied: Applied): ReadonlySet<string> {
  if (applied.owners === null) return applied.fullChains;
  return new Set([...applied.owners.chains.active()].map(([name]) => name));
}

/** Plans the transactions of one nft family. */
export class NftSyncer {
  #applied: Applied | null = null;
  /** IPv4 ClientIP service-port ids (derived from names; kept apart when two collide). */
  readonly #affinityIds = new AffinityIds();

  /** Forget what was applied: the next plan is a first (table-recreating) full sync. */
  reset(): void {
    this.#applied = null;
  }

  /**
   * For every ClientIP service port's id in the shared `affinity` map (IPv4), the endpoints
   * (`addr . port`) its clients may stick to, as last applied. Entries recorded for any other
   * endpoint, or under an id no port has, are stale.
   */
  affinityTargets(): Map<string, Set<string>> {
    const targets = new Map<string, Set<string>>();
    const applied = this.#applied;
    // No recorder: no ClientIP port (and no owners to build for that).
    if (applied === null || (applied.owners === null && !applied.affinity)) return targets;
    const { elements } = ownersOfApplied(applied);
    const valueOf = (line: string) => line.slice(line.lastIndexOf(" : ") + 3);
    for (const [id] of elements.keyed.get(NAMES.affinityRecorders)?.active() ?? []) {
      targets.set(id, new Set());
    }
    // Entry point → its service port's id; a port's targets are those of all its entries.
    const idOfEntry = new Map<string, string>();
    for (const [entry, line] of elements.keyed.get(NAMES.affinityIds)?.active() ?? []) {
      idOfEntry.set(entry, valueOf(line));
    }
    for (const index of elements.entries.values()) {
      for (const [entry] of index.active()) {
        const endpoints = targets.get(idOfEntry.get(entry) ?? "");
        if (endpoints === undefined) continue;
        for (const line of inForce(index.valuesOf(entry))) endpoints.add(valueOf(line));
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
    this.#affinityIds.retain((key) => input.services.get(key)?.sessionAffinity != null);
    const tx = new Transaction(options.family, options.table).addTable(TABLE_COMMENT);
    if (previous === null) tx.deleteTable().addTable(TABLE_COMMENT);
    const skeleton = renderSkeleton(options);
    const fragments = new Map<string, Fragment>();
    const sharedChains = new SharedChains();
    for (const [key, port] of input.services) {
      const fragment = renderServicePort(
        port,
        input.endpoints.get(key) ?? [],
        options,
        this.#affinityIds,
      );
      if (fragment) fragments.set(key, sharedChains.share(fragment));
    }
    const sets = new OwnedIndex<SetDef>();
    const table = new TableInForce();
    for (const [owner, fragment] of fragments) {
      if (fragment.sets !== undefined) {
        for (const [name, set] of fragment.sets) sets.add(name, owner, set);
      }
      table.add(owner, fragment);
    }
    const chains = table.chains;
    // What the commit keeps of the table in force (no closure here holds the rest, which is
    // garbage once the script is written, before it is applied).
    const fullChains = new Set(chains.keys());
    const affinity = table.hasElementsIn(NAMES.affinityRecorders);
    const previousChains = previous === null ? null : chainNamesOf(previous);
    for (const set of [...skeleton.sets, ...[...sets.active()].map(([, set]) => set)]) {
      tx.addSet(set);
      if (previous !== null && !set.dynamic) tx.flushSet(set.kind, set.name);
    }
    for (const { def } of skeleton.chains) {
      tx.addChain(def);
      if (previous !== null) tx.flushChain(def.name);
    }
    for (const name of chains.keys()) {
      tx.addChain({ name });
      if (previousChains?.has(name)) tx.flushChain(name);
    }
    for (const { def, rules } of skeleton.chains) rules.forEach((r) => tx.addRule(def.name, r));
    for (const [name, { rules }] of chains) rules.forEach((r) => tx.addRule(name, r));
    if (skeleton.elements.length > 0) addElements(tx, skeleton.elements);
    table.writeElements(tx);
    if (previous !== null) {
      deleteChains(tx, [...previousChains!].filter((n) => !fullChains.has(n)));
      for (const [name, set] of previous.sets.active()) {
        if (!sets.has(name)) tx.deleteSet(set.kind, name);
      }
    }
    return {
      get script() {
        return tx.toString();
      },
      transaction: tx,
      full: true,
      servicePortsChanged: fragments.size,
      commit: () => {
        this.#applied = {
          optionsKey,
          skeleton,
          fragments,
          sharedChains,
          sets,
          fullChains,
          affinity,
          owners: null,
        };
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
    const owners = ownersOfApplied(applied);
    const replaced = new Map<string, Fragment | null>();
    for (const key of changed) {
      const port = input.services.get(key);
      const fragment = port
        ? renderServicePort(port, input.endpoints.get(key) ?? [], options, this.#affinityIds)
        : null;
      if (!port?.sessionAffinity) this.#affinityIds.forget(key);
      const before = applied.fragments.get(key) ?? null;
      if (!sameFragment(before, fragment)) replaced.set(key, fragment);
    }
    // Record who stops and starts owning what; nothing is copied or changed until commit.
    const setChanges = new Changes<SetDef>();
    const chainChanges = new Changes<readonly string[]>();
    const elementChanges = new ElementChanges();
    for (const [owner, fragment] of replaced) {
      const before = applied.fragments.get(owner);
      for (const name of before?.sets?.keys() ?? []) setChanges.remove(name, owner);
      for (const name of before?.chains.keys() ?? []) chainChanges.remove(name, owner);
      for (const group of before?.elements ?? []) elementChanges.remove(group, owner);
      for (const [name, set] of fragment?.sets ?? []) setChanges.add(name, owner, set);
      for (const [name, rules] of fragment?.chains ?? []) chainChanges.add(name, owner, rules);
      for (const group of fragment?.elements ?? []) elementChanges.add(group, owner);
    }
    // Sets and chains first (elements and rules may point at new ones); deletions last, after
    // the elements and rules that pointed at them are gone.
    const deletedSets: SetDef[] = [];
    /** Sets whose definition changed (an IPv6 ClientIP timeout): recreated, clients forgotten. */
    const redefined: SetDef[] = [];
    for (const [name, changes] of setChanges.byId) {
      const before = applied.sets.get(name);
      const after = applied.sets.after(name, changes);
      if (after !== undefined && before === undefined) tx.addSet(after);
      if (after === undefined && before !== undefined) deletedSets.push(before);
      if (after !== undefined && before !== undefined && !sameSet(before, after)) {
        redefined.push(after);
      }
    }
    // nft cannot change a set's timeout; a set in use cannot be deleted: the chains using it are
    // emptied first, and written again below.
    const users = new Map<string, readonly string[]>();
    if (redefined.length > 0) {
      const refs = redefined.map((set) => `@${set.name} `);
      for (const [chain, rules] of owners.chains.active()) {
        if (rules.some((rule) => refs.some((ref) => rule.includes(ref)))) users.set(chain, rules);
      }
      users.forEach((_, chain) => tx.flushChain(chain));
      for (const set of redefined) tx.deleteSet(set.kind, set.name).addSet(set);
    }
    const deletedChains: string[] = [];
    const rewritten: [string, readonly string[]][] = [];
    for (const [name, changes] of chainChanges.byId) {
      const before = owners.chains.get(name);
      const after = owners.chains.after(name, changes);
      if (after === undefined) {
        if (before !== undefined) deletedChains.push(name);
        continue;
      }
      if (before !== undefined && sameRules(before, after)) continue;
      // Every new chain exists before any rule is written: a rewritten chain may jump to one.
      if (before === undefined) tx.addChain({ name });
      rewritten.push([name, after]);
    }
    if (users.size > 0) {
      const written = new Set([...rewritten.map(([name]) => name), ...deletedChains]);
      for (const [name, rules] of users) {
        // Not rewritten or deleted anyway: its rules again.
        if (written.has(name)) continue;
        const changes = chainChanges.byId.get(name);
        rewritten.push([name, changes ? owners.chains.after(name, changes)! : rules]);
      }
    }
    for (const [name, rules] of rewritten) {
      if (owners.chains.has(name)) tx.flushChain(name);
      rules.forEach((r) => tx.addRule(name, r));
    }
    const additions: [string, string[]][] = [];
    for (const [set, changes] of elementChanges.bySet) {
      const removals: string[] = [];
      const added: string[] = [];
      if (changes.entries) {
        const index = owners.elements.entries.get(set) ?? new OwnedIndex();
        // Changed and removed indexes of every entry point first, then the new ones, as a
        // change counted per key lists them.
        const grown: string[] = [];
        for (const [entry, change] of changes.byId) {
          const before = inForce(index.valuesOf(entry));
          const after = inForce(index.valuesAfter(entry, change));
          for (let i = 0; i < before.length; i++) {
            if (i < after.length && after[i] === before[i]) continue;
            removals.push(`${entry} . ${i}`);
            if (i < after.length) added.push(after[i]);
          }
          for (let i = before.length; i < after.length; i++) grown.push(after[i]);
        }
        added.push(...grown);
      } else {
        const index = owners.elements.keyed.get(set) ?? new OwnedIndex();
        for (const [key, change] of changes.byId) {
          const before = index.get(key);
          const after = index.after(key, change);
          if (before === after) continue;
          if (before !== undefined) removals.push(key);
          if (after !== undefined) added.push(after);
        }
      }
      if (removals.length > 0) tx.deleteElements(set, removals);
      if (added.length > 0) additions.push([set, added]);
    }
    for (const [set, lines] of additions) tx.addElementLines(set, lines);
    deleteChains(tx, deletedChains);
    deletedSets.forEach((set) => tx.deleteSet(set.kind, set.name));
    return {
      get script() {
        return tx.toString();
      },
      transaction: tx,
      full: false,
      servicePortsChanged: replaced.size,
      commit: () => {
        for (const [key, fragment] of replaced) {
          if (fragment) applied.fragments.set(key, applied.sharedChains.share(fragment));
          else applied.fragments.delete(key);
        }
        setChanges.applyTo(applied.sets);
        chainChanges.applyTo(owners.chains);
        elementChanges.applyTo(owners.elements);
      },
    };
  }
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
