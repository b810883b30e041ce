/**
 * What a full plan writes of the service ports' fragments: every chain and element once, with
 * the value of its smallest owner (as an `OwnedIndex` keeps in force), in the order first
 * seen — worked out in one pass without recording every owner.
 *
 * A partial plan needs every owner of every element (who else still wants it when one goes);
 * a full plan only needs the winner. Recording all owners cost a cold start at 50k services
 * ~4 map entries per service port and an owner map of 50k entries for the one shared balancer
 * chain; here an element costs one slot (a small integer in a map, its line and owner in
 * arrays), a shared chain one comparison per owner, and only keys with several owners (rare)
 * keep a list. The syncer builds the owner indexes later, from the same fragments, when a
 * partial plan first needs them (`ownersOf` in ownership.ts).
 *
 * @module
 */
import { ELEMENT_SEPARATOR, type EntryElements, type Fragment } from "./fragment.ts";
import { inForce } from "./ownership.ts";
import type { ElementRun, Transaction } from "./transaction.ts";

/** Keyed elements of one set: a slot per key, in the order keys were first seen. */
interface KeyedSlots {
  readonly entries: false;
  readonly slots: Map<string, number>;
  readonly lines: string[];
  /** Per slot, the owner in force: its index in the table's owners (a number, not a pointer). */
  readonly owners: number[];
}

/** An endpoint map's entry points: a slot per entry point; every owner's elements if shared. */
interface EntrySlots {
  readonly entries: true;
  readonly slots: Map<string, number>;
  readonly groups: EntryElements[];
  readonly owners: number[];
  /** Slots with several owners: each owner's elements, in the order they came. */
  readonly shared: Map<number, [string, EntryElements][]>;
}

/** The chains and elements in force after adding fragments, for a full plan to write. */
export class TableInForce {
  /** Chain name → its smallest owner and that owner's rules, in the order first seen. */
  readonly chains = new Map<string, { owner: string; rules: readonly string[] }>();
  /** Set names in the order of their first element. */
  readonly #sets = new Map<string, KeyedSlots | EntrySlots>();
  /** Owner keys in the order added; slots refer to owners by index here. */
  readonly #owners: string[] = [];

  /** Whether any fragment added an element to the set. */
  hasElementsIn(set: string): boolean {
    return this.#sets.has(set);
  }

  /** Adds a service port's fragment; `owner` is its key. */
  add(owner: string, fragment: Fragment): void {
    const owners = this.#owners;
    const ordinal = owners.length;
    owners.push(owner);
    for (const [name, rules] of fragment.chains) {
      const known = this.chains.get(name);
      if (known === undefined) this.chains.set(name, { owner, rules });
      else if (owner < known.owner) {
        known.owner = owner;
        known.rules = rules;
      }
    }
    for (const group of fragment.elements) {
      if (group.entry !== undefined) {
        const set = this.#entrySlots(group.set);
        const slot = set.slots.get(group.entry);
        if (slot === undefined) {
          set.slots.set(group.entry, set.groups.length);
          set.groups.push(group);
          set.owners.push(ordinal);
          continue;
        }
        let shared = set.shared.get(slot);
        if (shared === undefined) {
          set.shared.set(slot, shared = [[owners[set.owners[slot]], set.groups[slot]]]);
        }
        shared.push([owner, group]);
        continue;
      }
      const set = this.#keyedSlots(group.set);
      const { keys, lines } = group;
      for (let i = 0; i < keys.length; i++) {
        const slot = set.slots.get(keys[i]);
        if (slot === undefined) {
          set.slots.set(keys[i], set.lines.length);
          set.lines.push(lines[i]);
          set.owners.push(ordinal);
        } else if (owner < owners[set.owners[slot]]) {
          set.lines[slot] = lines[i];
          set.owners[slot] = ordinal;
        }
      }
    }
  }

  /** Writes every set's elements, sets in the order of their first element. */
  writeElements(tx: Transaction): void {
    for (const [name, set] of this.#sets) {
      if (!set.entries) {
        tx.addElementLines(name, set.lines);
        continue;
      }
      const runs: ElementRun[] = set.shared.size === 0 ? set.groups : [...set.groups];
      for (const [slot, owners] of set.shared) {
        // Per element index, the smallest owner that has one (see inForce).
        const lines = inForce(owners.sort(byOwner).map(([, group]) => group));
        runs[slot] = { text: lines.join(ELEMENT_SEPARATOR), count: lines.length };
      }
      tx.addElementRuns(name, runs);
    }
  }

  #keyedSlots(name: string): KeyedSlots {
    let set = this.#sets.get(name);
    if (set === undefined) {
      this.#sets.set(name, set = { entries: false, slots: new Map(), lines: [], owners: [] });
    }
    return set as KeyedSlots;
  }

  #entrySlots(name: string): EntrySlots {
    let set = this.#sets.get(name);
    if (set === undefined) {
      set = { entries: true, slots: new Map(), groups: [], owners: [], shared: new Map() };
      this.#sets.set(name, set);
    }
    return set as EntrySlots;
  }
}

function byOwner<T>(a: readonly [string, T], b: readonly [string, T]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}
