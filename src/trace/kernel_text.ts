/**
 * The kernel's answers `trace` reads besides the trace events, parsed: which hook each base
 * chain is on (`nft list chains`), the comment of a map element (`nft get element`: our
 * `namespace/name:port`), and a conntrack entry's reply direction (`conntrack -G`: the real
 * endpoint, and whether the source was rewritten).
 *
 * Pure; reads nft 1.0.6 and 1.1.x listings alike.
 *
 * @module
 */

/** `FAMILY TABLE CHAIN` → hook, for every base chain in a `nft list chains` listing. */
export function parseChainHooks(listing: string): Map<string, string> {
  const hooks = new Map<string, string>();
  let table = "";
  let chain = "";
  for (const raw of listing.split("\n")) {
    const line = raw.trim();
    let m = /^table (\S+) (\S+) \{/.exec(line);
    if (m !== null) {
      table = `${m[1]} ${m[2]}`;
      continue;
    }
    m = /^chain (\S+) \{/.exec(line);
    if (m !== null) {
      chain = m[1];
      continue;
    }
    m = /^type \S+ hook (\S+) /.exec(line);
    if (m !== null && table !== "" && chain !== "") hooks.set(`${table} ${chain}`, m[1]);
  }
  return hooks;
}

/** The comment of the one element in a `nft get element` answer, or null. */
export function elementComment(listing: string): string | null {
  const m = /elements = \{ .*? comment "((?:[^"\\]|\\.)*)"/.exec(listing);
  return m === null ? null : m[1];
}

/** A conntrack entry's two directions. */
export interface ConntrackEntry {
  readonly original: ConntrackTuple;
  readonly reply: ConntrackTuple;
}

/** One direction of a conntrack entry. */
export interface ConntrackTuple {
  readonly src: string;
  readonly dst: string;
  readonly sport: number | null;
  readonly dport: number | null;
}

/** The first entry in `conntrack -G`/`-L` output, or null. */
export function parseConntrackEntry(text: string): ConntrackEntry | null {
  for (const line of text.split("\n")) {
    const tuples: ConntrackTuple[] = [];
    const re = /src=(\S+) dst=(\S+)(?: sport=(\d+) dport=(\d+))?/g;
    for (const m of line.matchAll(re)) {
      tuples.push({
        src: m[1],
        dst: m[2],
        sport: m[3] === undefined ? null : Number(m[3]),
        dport: m[4] === undefined ? null : Number(m[4]),
      });
    }
    if (tuples.length >= 2) return { original: tuples[0], reply: tuples[1] };
  }
  return null;
}
