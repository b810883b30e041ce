/**
 * Who owns what in an nft table, as the syncer remembers it: the element index (per key, or per
 * entry point in the endpoint maps), the ownership changes a partial plan records and applies on
 * commit, shared chain maps, and when two fragments render the same.
 *
 * Chains and elements can be wanted by several service ports at once (every service with three
 * endpoints uses the chain `lb-3`; two services sharing an endpoint add the same hairpin
 * element): they are reference-counted by owner in {@link OwnedIndex}es, and the first owner's
 * content wins. An entry point's elements `entry . 0`, `entry . 1`, … are in force as if counted
 * per key: index `i` from the first owner that has an `i`-th endpoint ({@link inForce}).
 *
 * @module
 */
import {
  ELEMENT_SEPARATOR,
  type ElementGroup,
  type EntryElements,
  type Fragment,
} from "./fragment.ts";
import { OwnedIndex, type OwnerChanges } from "./owned_index.ts";
import type { SetDef } from "./transaction.ts";

/** Owners of the elements of every set, by set name. */
export interface ElementIndex {
  /** Per key: the owners' lines. */
  readonly keyed: Map<string, OwnedIndex<string>>;
  /** Endpoint maps, per entry point: the owners' elements. */
  readonly entries: Map<string, OwnedIndex<EntryElements>>;
}

/** Owners of every chain and element of a table, by service port key. */
export interface Owners {
  readonly chains: OwnedIndex<readonly string[]>;
  readonly elements: ElementIndex;
}

/**
 * The owners of the chains and elements of `fragments`, added in the map's order: what a
 * partial plan needs of the last full one. Built only when first needed, so a cold start's
 * full plan (where nothing is partial yet) does not pay for ~4 map entries per service port.
 */
export function ownersOf(fragments: ReadonlyMap<string, Fragment>): Owners {
  const chains = new OwnedIndex<readonly string[]>();
  const elements: ElementIndex = { keyed: new Map(), entries: new Map() };
  for (const [owner, fragment] of fragments) {
    for (const [name, rules] of fragment.chains) chains.add(name, owner, rules);
    for (const group of fragment.elements) {
      if (group.entry !== undefined) {
        indexOf(elements.entries, group.set).add(group.entry, owner, group);
        continue;
      }
      const index = indexOf(elements.keyed, group.set);
      const { keys, lines } = group;
      for (let i = 0; i < keys.length; i++) index.add(keys[i], owner, lines[i]);
    }
  }
  return { chains, elements };
}

/**
 * One chains map for every fragment whose only chain has the same name and rules: the 10k
 * services that use `lb-tcp-10` keep one map instead of 10k equal ones (~700 bytes each).
 */
export class SharedChains {
  readonly #byName = new Map<string, ReadonlyMap<string, readonly string[]>>();

  /** The fragment, or an equal one whose chains map is shared. */
  share(fragment: Fragment): Fragment {
    const { chains } = fragment;
    if (chains.size !== 1) return fragment;
    const [name, rules] = chains.entries().next().value!;
    const known = this.#byName.get(name);
    if (known === undefined) {
      this.#byName.set(name, chains);
      return fragment;
    }
    if (known === chains || !sameRules(known.get(name)!, rules)) return fragment;
    return { chains: known, elements: fragment.elements, sets: fragment.sets };
  }
}

/** Ownership changes of many ids, recorded during a partial plan. */
export class Changes<T> {
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

/** Changes of one set's elements: per key, or per entry point in an endpoint map. */
type SetChanges =
  | { readonly entries: false; readonly byId: Map<string, OwnerChanges<string>> }
  | { readonly entries: true; readonly byId: Map<string, OwnerChanges<EntryElements>> };

/** Element ownership changes of a partial plan, by set in the order they were first touched. */
export class ElementChanges {
  readonly bySet = new Map<string, SetChanges>();
  readonly #keyed = new Map<string, Changes<string>>();
  readonly #entries = new Map<string, Changes<EntryElements>>();

  remove(group: ElementGroup, owner: string): void {
    if (group.entry !== undefined) this.#entriesOf(group.set).remove(group.entry, owner);
    else {
      const changes = this.#keyedOf(group.set);
      for (const key of group.keys) changes.remove(key, owner);
    }
  }

  add(group: ElementGroup, owner: string): void {
    if (group.entry !== undefined) this.#entriesOf(group.set).add(group.entry, owner, group);
    else {
      const changes = this.#keyedOf(group.set);
      group.keys.forEach((key, i) => changes.add(key, owner, group.lines[i]));
    }
  }

  applyTo(elements: ElementIndex): void {
    for (const [set, changes] of this.#keyed) changes.applyTo(indexOf(elements.keyed, set));
    for (const [set, changes] of this.#entries) changes.applyTo(indexOf(elements.entries, set));
  }

  #keyedOf(set: string): Changes<string> {
    let changes = this.#keyed.get(set);
    if (changes === undefined) {
      this.#keyed.set(set, changes = new Changes());
      this.bySet.set(set, { entries: false, byId: changes.byId });
    }
    return changes;
  }

  #entriesOf(set: string): Changes<EntryElements> {
    let changes = this.#entries.get(set);
    if (changes === undefined) {
      this.#entries.set(set, changes = new Changes());
      this.bySet.set(set, { entries: true, byId: changes.byId });
    }
    return changes;
  }
}

function indexOf<T>(indexes: Map<string, OwnedIndex<T>>, set: string): OwnedIndex<T> {
  let index = indexes.get(set);
  if (index === undefined) indexes.set(set, index = new OwnedIndex());
  return index;
}

/**
 * The elements in force for one entry point, given every owner's (the first owner's first):
 * element `i` of the first owner that has one, as if each key were owned on its own.
 */
export function inForce(owners: readonly EntryElements[]): readonly string[] {
  const all = owners.map((o) => o.text.split(ELEMENT_SEPARATOR));
  if (all.length <= 1) return all[0] ?? [];
  const longest = Math.max(...all.map((lines) => lines.length));
  const lines: string[] = [];
  for (let i = 0; i < longest; i++) lines.push(all.find((o) => i < o.length)![i]);
  return lines;
}

/** Two chains' rules (or any two string lists) are the same, in order. */
export function sameRules(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((r, i) => r === b[i]);
}

/** Two set definitions are the same (`add set` of one where the other is is a no-op). */
export function sameSet(a: SetDef, b: SetDef): boolean {
  return a.kind === b.kind && a.name === b.name && a.type === b.type &&
    sameRules(a.flags ?? [], b.flags ?? []) && a.timeoutSeconds === b.timeoutSeconds &&
    a.size === b.size && a.dynamic === b.dynamic && a.comment === b.comment;
}

/** Two renders of a service port are the same: a partial plan then leaves it alone. */
export function sameFragment(a: Fragment | null, b: Fragment | null): boolean {
  if (a === null || b === null) return a === b;
  if (a.elements.length !== b.elements.length || a.chains.size !== b.chains.size) return false;
  if ((a.sets?.size ?? 0) !== (b.sets?.size ?? 0)) return false;
  for (const [name, set] of a.sets ?? []) {
    const other = b.sets?.get(name);
    if (other === undefined || !sameSet(set, other)) return false;
  }
  for (const [name, rules] of a.chains) {
    const other = b.chains.get(name);
    if (other === undefined || !sameRules(rules, other)) return false;
  }
  return a.elements.every((g, i) => {
    const o = b.elements[i];
    if (g.set !== o.set || g.entry !== o.entry) return false;
    if (g.entry !== undefined) {
      return o.entry !== undefined && g.count === o.count && g.text === o.text;
    }
    return o.entry === undefined && sameRules(g.keys, o.keys) && sameRules(g.lines, o.lines);
  });
}
