/**
 * Reference-counted ownership of shared ruleset objects: each id (a chain name, a set name, a
 * set element) is wanted by one or more owners (service port keys), and the first owner's value
 * is the one in force.
 *
 * Built for the common case — one owner — with a cheap path for objects shared by thousands
 * (every 3-endpoint TCP service owns `lb-tcp-3`): planning a change never copies an owner list,
 * it records the owners removed and added and works out the value in force before and after.
 *
 * @module
 */

interface Entry<T> {
  /** The owner whose value is in force. */
  owner: string;
  value: T;
  /** Further owners, in the order they came. */
  others?: Map<string, T>;
}

/** Pending ownership changes of one id. */
export interface OwnerChanges<T> {
  readonly removed: Set<string>;
  readonly added: Map<string, T>;
}

/** Owners of ids, with the value in force per id. */
export class OwnedIndex<T> {
  readonly #entries = new Map<string, Entry<T>>();

  /** Number of ids with at least one owner. */
  get size(): number {
    return this.#entries.size;
  }

  /** Ids and the values in force. */
  *active(): IterableIterator<[string, T]> {
    for (const [id, entry] of this.#entries) yield [id, entry.value];
  }

  /** The value in force for an id, if anyone owns it. */
  get(id: string): T | undefined {
    return this.#entries.get(id)?.value;
  }

  /** Whether anyone owns the id. */
  has(id: string): boolean {
    return this.#entries.has(id);
  }

  /** Whether more than one owner wants the id. */
  isShared(id: string): boolean {
    return (this.#entries.get(id)?.others?.size ?? 0) > 0;
  }

  /** Every owner's value for an id, the one in force first (empty when nobody owns it). */
  valuesOf(id: string): T[] {
    const entry = this.#entries.get(id);
    if (entry === undefined) return [];
    const values = [entry.value];
    for (const value of entry.others?.values() ?? []) values.push(value);
    return values;
  }

  /** Adds (or updates, keeping its place) an owner's value. */
  add(id: string, owner: string, value: T): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) this.#entries.set(id, { owner, value });
    else if (entry.owner === owner) entry.value = value;
    else (entry.others ??= new Map()).set(owner, value);
  }

  /** Removes an owner; the next owner's value comes into force. */
  remove(id: string, owner: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) return;
    if (entry.owner !== owner) {
      entry.others?.delete(owner);
      return;
    }
    const next = entry.others?.entries().next();
    if (next === undefined || next.done) {
      this.#entries.delete(id);
      return;
    }
    const [nextOwner, nextValue] = next.value;
    entry.others!.delete(nextOwner);
    entry.owner = nextOwner;
    entry.value = nextValue;
  }

  /**
   * The value in force after `changes`, without applying them. An owner both removed and added
   * keeps its place with the new value, as {@link apply} does.
   */
  after(id: string, changes: OwnerChanges<T>): T | undefined {
    const { removed, added } = changes;
    const entry = this.#entries.get(id);
    if (entry !== undefined) {
      if (!removed.has(entry.owner) || added.has(entry.owner)) {
        return added.get(entry.owner) ?? entry.value;
      }
      for (const [owner, value] of entry.others ?? []) {
        if (!removed.has(owner) || added.has(owner)) return added.get(owner) ?? value;
      }
    }
    for (const value of added.values()) return value;
    return undefined;
  }

  /**
   * Every owner's value after `changes`, in the order {@link apply} leaves them (the one in
   * force first), without applying them.
   */
  valuesAfter(id: string, changes: OwnerChanges<T>): T[] {
    const { removed, added } = changes;
    const values: T[] = [];
    const entry = this.#entries.get(id);
    if (entry !== undefined) {
      const keep = (owner: string, value: T) => {
        if (added.has(owner)) values.push(added.get(owner)!);
        else if (!removed.has(owner)) values.push(value);
      };
      keep(entry.owner, entry.value);
      for (const [owner, value] of entry.others ?? []) keep(owner, value);
    }
    for (const [owner, value] of added) {
      if (entry === undefined || (entry.owner !== owner && !entry.others?.has(owner))) {
        values.push(value);
      }
    }
    return values;
  }

  /** Applies changes computed for {@link after}. */
  apply(id: string, changes: OwnerChanges<T>): void {
    for (const owner of changes.removed) {
      if (!changes.added.has(owner)) this.remove(id, owner);
    }
    for (const [owner, value] of changes.added) this.add(id, owner, value);
  }
}
