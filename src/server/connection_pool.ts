/**
 * How many connections the proxy's own HTTP servers (health, metrics, health-check node ports)
 * may hold, and which one goes when a new one arrives at the cap: a {@link ConnectionPool} shared
 * by every listener (a budget of descriptors) and a cap per listener.
 *
 * When a listener or the whole pool is full, the new connection is still accepted and a
 * connection that is *waiting* — for its request head (half-open) or for its next request (idle
 * keep-alive) — is closed to make room: the oldest waiting one of the client address that holds
 * the most connections there. So a flood of connections that never send a request, or that sit
 * idle, cannot lock a prober out: a prober from another address is never the one closed while
 * the flood holds more, and one from the flood's own address is the newest waiting connection,
 * answered long before it would be the oldest. Connections being answered are never evicted;
 * when every connection is, the new one is refused (closed at once). Pure bookkeeping: closing
 * is the `close` callback the server gives.
 *
 * @example
 * ```ts
 * const pool = new ConnectionPool({ maxConnections: 384 });
 * const health = pool.listener("health", 128);
 * const entry = health.admit("192.168.77.2", () => conn.close()); // null: refused
 * entry?.setState("active"); // answering: never evicted
 * entry?.setState("idle"); // waiting for the next request
 * entry?.release(); // closed by the server
 * ```
 *
 * @module
 */

/**
 * What a connection is doing: `reading` its request head (from accept, or from the first byte of
 * a later request), `idle` between requests, or `active` while its request is answered.
 */
export type ConnectionState = "reading" | "idle" | "active";

/** Options of {@link ConnectionPool}. */
export interface ConnectionPoolOptions {
  /** Most connections over all listeners of the pool; at least 1. */
  readonly maxConnections: number;
  /** A connection of the listener named `server` was closed to make room. */
  readonly onEvicted?: (server: string) => void;
  /** A new connection to the listener named `server` was closed at once: nothing could go. */
  readonly onRefused?: (server: string) => void;
}

/** One admitted connection. */
export interface PooledConnection {
  /** Its current state. */
  readonly state: ConnectionState;
  /** Records a new state; a change makes it the newest of its address (no-op once gone). */
  setState(state: ConnectionState): void;
  /** The server closed it; frees its place. Idempotent. */
  release(): void;
}

interface Entry extends PooledConnection {
  readonly listener: PoolListener;
  readonly source: string;
  state: ConnectionState;
  readonly close: () => void;
  gone: boolean;
}

/**
 * A set of connections grouped by client address, each group in age order (an entry is
 * re-inserted when its state changes, so the first waiting entry of a group is its oldest).
 */
class Group {
  readonly bySource = new Map<string, Set<Entry>>();
  size = 0;

  add(e: Entry): void {
    let set = this.bySource.get(e.source);
    if (set === undefined) this.bySource.set(e.source, set = new Set());
    set.add(e);
    this.size++;
  }

  delete(e: Entry): void {
    const set = this.bySource.get(e.source);
    if (set === undefined || !set.delete(e)) return;
    this.size--;
    if (set.size === 0) this.bySource.delete(e.source);
  }

  /** The oldest waiting entry of the address holding the most entries that has one. */
  victim(): Entry | undefined {
    let victim: Entry | undefined;
    let most = 0;
    for (const set of this.bySource.values()) {
      if (set.size <= most) continue;
      for (const e of set) {
        if (e.state === "active") continue;
        victim = e;
        most = set.size;
        break;
      }
    }
    return victim;
  }
}

/** The connection budget of a process's servers. */
export class ConnectionPool {
  /** Most connections over all listeners. */
  readonly maxConnections: number;
  readonly #options: ConnectionPoolOptions;
  readonly #all = new Group();

  /** Creates an empty pool. */
  constructor(options: ConnectionPoolOptions) {
    if (!(options.maxConnections >= 1)) {
      throw new RangeError(
        `cannot use a connection budget of ${options.maxConnections}: must be 1 or more`,
      );
    }
    this.maxConnections = Math.floor(options.maxConnections);
    this.#options = options;
  }

  /** Connections held now, over all listeners. */
  get size(): number {
    return this.#all.size;
  }

  /** Connections held now by listener name (listeners may share a name). */
  sizes(): Map<string, number> {
    const sizes = new Map<string, number>();
    for (const set of this.#all.bySource.values()) {
      for (const e of set) sizes.set(e.listener.name, (sizes.get(e.listener.name) ?? 0) + 1);
    }
    return sizes;
  }

  /**
   * A listener's share: at most `maxConnections` (capped at the pool's) of its own. `name` labels
   * the evicted and refused counts (`health`, `metrics`, `health-check`).
   */
  listener(name: string, maxConnections: number): PoolListener {
    const max = Math.max(1, Math.min(Math.floor(maxConnections), this.maxConnections));
    return new PoolListener(name, max, (source, close, own) => this.#admit(source, close, own));
  }

  #admit(
    source: string,
    close: () => void,
    own: { listener: PoolListener; group: Group },
  ): PooledConnection | null {
    let victim: Entry | undefined;
    let full = false;
    if (own.group.size >= own.listener.maxConnections) {
      full = true;
      victim = own.group.victim();
    } else if (this.#all.size >= this.maxConnections) {
      full = true;
      victim = this.#all.victim();
    }
    if (full && victim === undefined) {
      this.#options.onRefused?.(own.listener.name);
      return null;
    }
    if (victim !== undefined) {
      victim.release();
      victim.close();
      this.#options.onEvicted?.(victim.listener.name);
    }
    const entry: Entry = {
      listener: own.listener,
      source,
      state: "reading",
      close,
      gone: false,
      setState: (state: ConnectionState) => {
        if (entry.gone || entry.state === state) return;
        own.group.delete(entry);
        this.#all.delete(entry);
        entry.state = state;
        own.group.add(entry);
        this.#all.add(entry);
      },
      release: () => {
        if (entry.gone) return;
        entry.gone = true;
        own.group.delete(entry);
        this.#all.delete(entry);
      },
    };
    own.group.add(entry);
    this.#all.add(entry);
    return entry;
  }
}

type Admit = (
  source: string,
  close: () => void,
  own: { listener: PoolListener; group: Group },
) => PooledConnection | null;

/** One listener's share of a {@link ConnectionPool}. */
export class PoolListener {
  /** Labels its evicted and refused counts. */
  readonly name: string;
  /** Most connections of this listener. */
  readonly maxConnections: number;
  readonly #admit: Admit;
  readonly #group = new Group();

  /** Use {@link ConnectionPool.listener}. */
  constructor(name: string, maxConnections: number, admit: Admit) {
    this.name = name;
    this.maxConnections = maxConnections;
    this.#admit = admit;
  }

  /** Connections this listener holds now. */
  get size(): number {
    return this.#group.size;
  }

  /**
   * Admits a new connection from the client address `source` in state `reading`, first closing
   * (through its `close`) a waiting connection when this listener or the pool is full (see the
   * module doc for which). Returns null when full of connections being answered: the caller
   * closes the new one.
   */
  admit(source: string, close: () => void): PooledConnection | null {
    return this.#admit(source, close, { listener: this, group: this.#group });
  }
}
