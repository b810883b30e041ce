/**
 * ClientIP affinity in IPv4: the ids that make it hold per service port, and the clean-up of
 * stale entries of the shared `affinity` map.
 *
 * Upstream sticks a client to an endpoint per service port, whichever entry point (cluster
 * IP, external IP, load-balancer IP, node port) it came through: one set of clients per
 * endpoint, checked by every entry's chain. One set per endpoint is what the design rules out
 * (a set per service makes the kernel's loads quadratic), and a lookup key can hold only packet
 * fields, never a constant naming the service port. So each ClientIP service port gets an id,
 * and every entry point's element in `affinity-ids` maps the entry to it: the shared sticky
 * chain writes the id into the packet's `meta priority` (only when that is unset, 0), looks the
 * client up with `client . id`, and `nat-postrouting` records the endpoint chosen under the same
 * key (`affinity-recorders`: id → the recorder with the port's timeout), then clears the priority
 * again before the packet leaves, so queueing never sees it. Only a connection's first packet
 * passes the nat chains.
 *
 * An id is derived from the service port's name (`AffinityIds`), so a port keeps it across
 * syncs and restarts and no other port alive shares it. Entries recorded under an id whose port
 * went away, or for endpoints it no longer has, are deleted after the sync that removed them.
 *
 * The map is written by the packet path, so only the kernel knows its entries. Without the
 * clean-up a client stuck to a removed endpoint would keep being sent there until its entry
 * times out (3 hours by default); upstream's per-endpoint sets vanish with the endpoint.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { NAMES } from "./names.ts";
import { Transaction } from "./transaction.ts";

/** Ids lie in `1000:0`–`ffff:fffe`, far above the small priorities programs set on sockets. */
const ID_BASE = 0x10000000;
const ID_SPAN = 0xffffffff - ID_BASE;

/**
 * Gives each ClientIP service port (by its key) an id derived from its name — so a port's rules
 * never depend on which other ports exist — and, in the rare case two ports' names give the
 * same id, another one for the later port, so no two ports alive share an id.
 *
 * @example
 * ```ts
 * const ids = new AffinityIds();
 * formatAffinityId(ids.idOf("default/web:http/TCP")); // e.g. "8d1f:3a2c"
 * ```
 */
export class AffinityIds {
  readonly #ids = new Map<string, number>();
  readonly #owners = new Map<number, string>();

  /** The id of a service port, assigned on first use. */
  idOf(key: string): number {
    let id = this.#ids.get(key);
    if (id !== undefined) return id;
    for (let attempt = 0;; attempt++) {
      id = hashId(attempt === 0 ? key : `${key}#${attempt}`);
      if (!this.#owners.has(id)) break;
    }
    this.#ids.set(key, id);
    this.#owners.set(id, key);
    return id;
  }

  /** Forgets the ids of service ports not in `keep`. */
  retain(keep: (key: string) => boolean): void {
    for (const key of [...this.#ids.keys()]) if (!keep(key)) this.forget(key);
  }

  /** Forgets one service port's id. */
  forget(key: string): void {
    const id = this.#ids.get(key);
    if (id === undefined) return;
    this.#ids.delete(key);
    this.#owners.delete(id);
  }
}

function hashId(text: string): number {
  const digest = createHash("sha256").update(text).digest();
  return ID_BASE + (digest.readUInt32BE(0) % ID_SPAN);
}

/** An id as nft writes a `meta priority` value (`major:minor`, hexadecimal). */
export function formatAffinityId(id: number): string {
  return `${(id >>> 16).toString(16)}:${(id & 0xffff).toString(16)}`;
}

/** One entry of the affinity map: `client . id` → `endpoint . port`. */
export interface AffinityEntry {
  readonly key: string;
  /** The service port's id, as nft prints it (`4b50:1`). */
  readonly id: string;
  /** `endpoint . port`. */
  readonly endpoint: string;
}

/** Parses `nft -j list map ip TABLE affinity` output. */
export function parseAffinityListing(json: string): AffinityEntry[] {
  const doc = JSON.parse(json) as { nftables?: unknown[] };
  const entries: AffinityEntry[] = [];
  for (const item of doc.nftables ?? []) {
    const elems = (item as { map?: { elem?: unknown[] } }).map?.elem ?? [];
    for (const pair of elems) {
      if (!Array.isArray(pair) || pair.length !== 2) continue;
      const key = concat(unwrap(pair[0]));
      const value = concat(unwrap(pair[1]));
      if (key.length !== 2 || value.length !== 2) continue;
      entries.push({ key: key.join(" . "), id: key[1], endpoint: value.join(" . ") });
    }
  }
  return entries;
}

/** Keys of entries whose id is no service port's any more, or whose endpoint is not its target. */
export function staleAffinityKeys(
  entries: readonly AffinityEntry[],
  targets: ReadonlyMap<string, ReadonlySet<string>>,
): string[] {
  return entries
    .filter((e) => !(targets.get(e.id)?.has(e.endpoint) ?? false))
    .map((e) => e.key);
}

/** The transaction deleting stale entries ("" when there are none). */
export function deleteAffinityScript(table: string, keys: readonly string[]): string {
  return new Transaction("ip", table).deleteElements(NAMES.affinity, keys).toString();
}

function unwrap(value: unknown): unknown {
  const elem = (value as { elem?: { val?: unknown } })?.elem;
  return elem !== undefined ? elem.val : value;
}

function concat(value: unknown): string[] {
  const parts = (value as { concat?: unknown[] })?.concat;
  return Array.isArray(parts) ? parts.map((p) => String(p)) : [];
}
