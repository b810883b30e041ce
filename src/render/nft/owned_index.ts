/**
 * Reference-counted ownership of shared ruleset objects: each id (a chain name, a set name, a
 * set element) is wanted by one or more owners (service port keys), and the smallest owner
 * key's value is the one in force — so the table is a function of the state alone, whatever
 * order objects arrived in (two Services claiming one address get the same winner after a
 * restart as before).
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

  /**
   * Calls `fn` with every id, its value in force and whether other owners want it too, in the
   * order ids were first added (cheaper than {@link active} for a whole table).
   */
  forEachActive(fn: (id: string, value: T, shared: boolean) => void): void {
    for (const [id, entry] of this.#entries) {
      fn(id, entry.value, entry.others !== undefined && entry.others.size > 0);
    }
  }

  /** The value in force for an id, if anyone owns it. */
  get(id: string): T | undefined {
    return this.#entries.get(id)?.value;
  }

  /** Whether anyone owns the id. */
  has(id: string): boolean {
    return this.#entries.has(id);
  }

  /** Every owner's value for an id, by owner key: the one in force first. */
  valuesOf(id: string): T[] {
    const entry = this.#entries.get(id);
    if (entry === undefined) return [];
    return [[entry.owner, entry.value] as const, ...entry.others ?? []]
      .sort(byOwner).map(([, value]) => value);
  }

  /** Adds (or updates) an owner's value; the smallest owner key is the one in force. */
  add(id: string, owner: string, value: T): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) this.#entries.set(id, { owner, value });
    else if (entry.owner === owner) entry.value = value;
    else if (owner < entry.owner) {
      (entry.others ??= new Map()).set(entry.owner, entry.value);
      entry.owner = owner;
      entry.value = value;
    } else (entry.others ??= new Map()).set(owner, value);
  }

  /** Removes an owner; the next smallest owner's value comes into force. */
  remove(id: string, owner: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) return;
    if (entry.owner !== owner) {
      entry.others?.delete(owner);
      return;
    }
    let next: string | undefined;
    for (const candidate of entry.others?.keys() ?? []) {
      if (next === undefined || candidate < next) next = candidate;
    }
    if (next === undefined) {
      this.#entries.delete(id);
      return;
    }
    entry.owner = next;
    entry.value = entry.others!.get(next)!;
    entry.others!.delete(next);
  }

  /** The value in force after `changes` (the smallest remaining owner's), without applying. */
  after(id: string, changes: OwnerChanges<T>): T | undefined {
    const { removed, added } = changes;
    const entry = this.#entries.get(id);
    // Fast path: the owner in force stays and no smaller one comes.
    if (entry !== undefined && (!removed.has(entry.owner) || added.has(entry.owner))) {
      let smaller = false;
      for (const owner of added.keys()) if (owner < entry.owner) smaller = true;
      if (!smaller) return added.get(entry.owner) ?? entry.value;
    }
    // The smallest surviving owner, found in one pass: an id can have thousands of owners.
    let best: string | undefined;
    let value: T | undefined;
    const consider = (owner: string, candidate: T) => {
      if (best === undefined || owner < best) {
        best = owner;
        value = candidate;
      }
    };
    for (const [owner, candidate] of added) consider(owner, candidate);
    if (entry !== undefined) {
      if (!removed.has(entry.owner) && !added.has(entry.owner)) consider(entry.owner, entry.value);
      for (const [owner, candidate] of entry.others ?? []) {
        if (!removed.has(owner) && !added.has(owner)) consider(owner, candidate);
      }
    }
    return value;
  }

  /** Every owner's value after `changes`, by owner key (the one in force first). */
  valuesAfter(id: string, changes: OwnerChanges<T>): T[] {
    return this.#survivors(id, changes).map(([, value]) => value);
  }

  #survivors(id: string, changes: OwnerChanges<T>): [string, T][] {
    const { removed, added } = changes;
    const entry = this.#entries.get(id);
    const survivors = new Map<string, T>();
    if (entry !== undefined) {
      for (const [owner, value] of [[entry.owner, entry.value] as const, ...entry.others ?? []]) {
        if (!removed.has(owner)) survivors.set(owner, value);
      }
    }
    for (const [owner, value] of added) survivors.set(owner, value);
    return [...survivors].sort(byOwner);
  }

  /** Applies changes computed for {@link after}. */
  apply(id: string, changes: OwnerChanges<T>): void {
    for (const owner of changes.removed) {
      if (!changes.added.has(owner)) this.remove(id, owner);
    }
    for (const [owner, value] of changes.added) this.add(id, owner, value);
  }
}

function byOwner<T>(a: readonly [string, T], b: readonly [string, T]): number {
  return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}
