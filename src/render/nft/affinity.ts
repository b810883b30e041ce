/**
 * Stale ClientIP affinity: which entries of the `affinity` map (IPv4) point at endpoints a
 * service no longer has, read from `nft -j list map` output, and the transaction deleting them.
 *
 * The map is written by the packet path, so only the kernel knows its entries. Without this
 * clean-up a client stuck to a removed endpoint would keep being sent there until its entry
 * times out (3 hours by default); upstream's per-endpoint sets vanish with the endpoint.
 *
 * @module
 */
import { NAMES } from "./names.ts";
import { protocolName } from "../../model/ip_protocol.ts";
import { Transaction } from "./transaction.ts";

/** One entry of the affinity map: `client . entry . proto . port` → `endpoint . port`. */
export interface AffinityEntry {
  readonly key: string;
  /** `entry . proto . port`. */
  readonly entry: string;
  /** `endpoint . port`. */
  readonly endpoint: string;
}

/**
 * Parses `nft -j list map ip TABLE affinity` output. The protocol is named as the planner names
 * it (`tcp`) even where nft prints its number (`6`, without /etc/protocols).
 */
export function parseAffinityListing(json: string): AffinityEntry[] {
  const doc = JSON.parse(json) as { nftables?: unknown[] };
  const entries: AffinityEntry[] = [];
  for (const item of doc.nftables ?? []) {
    const elems = (item as { map?: { elem?: unknown[] } }).map?.elem ?? [];
    for (const pair of elems) {
      if (!Array.isArray(pair) || pair.length !== 2) continue;
      const key = concat(unwrap(pair[0]));
      if (key.length === 4) key[2] = protocolName(key[2]);
      const value = concat(unwrap(pair[1]));
      if (key.length !== 4 || value.length !== 2) continue;
      entries.push({
        key: key.join(" . "),
        entry: key.slice(1).join(" . "),
        endpoint: value.join(" . "),
      });
    }
  }
  return entries;
}

/** Keys of entries whose entry point has affinity and whose endpoint is no longer a target. */
export function staleAffinityKeys(
  entries: readonly AffinityEntry[],
  targets: ReadonlyMap<string, ReadonlySet<string>>,
): string[] {
  return entries
    .filter((e) => !(targets.get(e.entry)?.has(e.endpoint) ?? false))
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
