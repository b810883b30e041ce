/**
 * Per-service new-connection counts read from the kernel: the `packets` counters of the
 * `service-ips` and `service-nodeports` elements (declared with `counter`), summed per service
 * port over entry points and families, and kept monotonic across element re-adds.
 *
 * The dispatch maps are looked up from the nat chains, which see only the first packet of a
 * connection, so an element's packets are the connections it dispatched. Each element carries
 * the comment `namespace/name:port` naming its service port.
 *
 * A re-added element (a full re-sync flushes the maps) starts again from 0: the collector
 * notices a count lower than the last one read and adds the new count whole, so connections
 * made between the last read and the re-add are lost, never counted twice.
 *
 * @example
 * ```ts
 * const counters = new ServiceCounters(nftServiceCounterReader("kube-nftproxy"));
 * for (const c of await counters.read()) console.log(c.namespace, c.service, c.port, c.connections);
 * ```
 *
 * @module
 */
import { type NftRunnerOptions, runNft } from "./nft.ts";
import { NAMES } from "../render/nft/names.ts";
import { dumpSetElements, netlinkOr } from "./nft_netlink.ts";
import { protocolName } from "../model/ip_protocol.ts";

/** One counted element of a dispatch map, as the kernel lists it. */
export interface ElementCount {
  /** `ip` or `ip6`. */
  readonly family: string;
  /** `service-ips` or `service-nodeports`. */
  readonly map: string;
  /**
   * Tells entry points apart: the key as nft writes it (`10.96.0.10 . tcp . 80`, protocols by
   * name whether or not nft printed numbers), or its bytes where read over netlink.
   */
  readonly key: string;
  /** The element's comment: `namespace/name:port`. */
  readonly comment: string;
  /** Packets the element's counter saw (new connections). */
  readonly packets: number;
}

/** New connections of one service port, since the collector started. */
export interface ServiceConnections {
  readonly namespace: string;
  readonly service: string;
  /** The port's name, as in the element comment; empty for an unnamed port. */
  readonly port: string;
  readonly connections: number;
}

/** Reads the counted elements of every dispatch map (e.g. {@link nftServiceCounterReader}). */
export type ElementCountReader = () => Promise<readonly ElementCount[]>;

/** The maps whose elements count connections. */
export const COUNTED_MAPS: readonly string[] = [NAMES.serviceIPs, NAMES.serviceNodeports];

/**
 * The counted elements of one `nft -j list map …` output. Elements without a counter or a
 * `namespace/name:port` comment are skipped; malformed JSON throws. Reads every nft release's
 * JSON alike (1.0.6 and 1.1.3 checked), with protocols printed as names or as numbers.
 *
 * @example
 * ```ts
 * parseElementCounts(stdout); // [{ family: "ip", map: "service-ips", key: "…", comment: "default/web:http", packets: 3 }]
 * ```
 */
export function parseElementCounts(json: string): ElementCount[] {
  const out: ElementCount[] = [];
  const doc = JSON.parse(json) as { nftables?: unknown[] };
  for (const item of doc.nftables ?? []) {
    const map = (item as {
      map?: { family?: string; name?: string; type?: unknown; elem?: unknown[] };
    }).map;
    if (map === undefined) continue;
    const types = Array.isArray(map.type) ? map.type : [map.type];
    for (const entry of map.elem ?? []) {
      // A map element is [key, verdict]; the key is wrapped in {elem: {val, comment, counter}}.
      const key = Array.isArray(entry) ? entry[0] : entry;
      const elem = (key as {
        elem?: { val?: unknown; comment?: string; counter?: { packets?: number } };
      }).elem;
      const packets = elem?.counter?.packets;
      const comment = elem?.comment;
      if (typeof packets !== "number" || comment === undefined || !parsePortComment(comment)) {
        continue;
      }
      out.push({
        family: map.family ?? "",
        map: map.name ?? "",
        key: keyText(elem?.val, types),
        comment,
        packets,
      });
    }
  }
  return out;
}

/** An element's key (`{concat: [...]}` or one value) as text, protocols (`inet_proto`) by name. */
function keyText(val: unknown, types: readonly unknown[]): string {
  const parts = (val as { concat?: unknown[] } | undefined)?.concat ?? [val];
  return parts.map((part, i) =>
    typeof part === "string" || typeof part === "number"
      ? (types[i] === "inet_proto" ? protocolName(part) : String(part))
      : JSON.stringify(part)
  ).join(" . ");
}

/**
 * `namespace/name:port` (or `namespace/name` for an unnamed port, whose `port` is then empty)
 * split into its parts, or undefined when it is not one.
 */
export function parsePortComment(
  comment: string,
): { namespace: string; service: string; port: string } | undefined {
  const m = /^([^/:\s]+)\/([^/:\s]+)(?::(\S+))?$/.exec(comment);
  return m ? { namespace: m[1], service: m[2], port: m[3] ?? "" } : undefined;
}

/**
 * A reader of the kernel's counted elements in table `table` (the `families`, default both;
 * both dispatch maps), with one `nft -j` run per map. A map or table that does not exist reads
 * as empty.
 */
export function nftServiceCounterReader(
  table: string,
  options: NftRunnerOptions & { families?: readonly string[] } = {},
): ElementCountReader {
  return async () => {
    const lists = await Promise.all(
      (options.families ?? ["ip", "ip6"]).flatMap((family) =>
        COUNTED_MAPS.map((map) => runNft(["-j", "list", "map", family, table, map], options))
      ),
    );
    return lists.flatMap((out) => out.code === 0 ? parseElementCounts(out.stdout) : []);
  };
}

/**
 * Turns kernel element counters into monotonic per-service-port totals (see module doc for
 * what a re-add loses). Totals of service ports whose elements are gone are kept.
 */
export class ServiceCounters {
  readonly #reader: ElementCountReader;
  /**
   * The elements read last, per map (`family map`), by key: an element whose key comes back
   * with another comment is another element (a re-add for another service port).
   */
  #last = new Map<string, Map<string, ElementCount>>();
  /** Total per service-port comment. */
  readonly #totals = new Map<string, number>();
  /** The comments of {@link #totals}, sorted, with their parts. */
  #sorted: { comment: string; name: { namespace: string; service: string; port: string } }[] = [];
  #inFlight: Promise<ServiceConnections[]> | undefined;

  /** Reads elements through `reader` on each {@link read}. */
  constructor(reader: ElementCountReader) {
    this.#reader = reader;
  }

  /**
   * Reads the kernel and returns every service port's total, sorted by comment. Calls made
   * while a read is in flight share it (two listings applied out of order would count twice).
   */
  read(): Promise<ServiceConnections[]> {
    this.#inFlight ??= this.#read().finally(() => this.#inFlight = undefined);
    return this.#inFlight;
  }

  async #read(): Promise<ServiceConnections[]> {
    const elements = await this.#reader();
    const seen = new Map<string, Map<string, ElementCount>>();
    // Elements come map by map: the map's tables are looked up when it changes.
    let family: string | undefined;
    let map: string | undefined;
    let last: Map<string, ElementCount> | undefined;
    let now = new Map<string, ElementCount>();
    for (const e of elements) {
      if (e.family !== family || e.map !== map) {
        ({ family, map } = e);
        const id = `${family} ${map}`;
        last = this.#last.get(id);
        now = seen.get(id) ?? new Map();
        seen.set(id, now);
      }
      const before = last?.get(e.key);
      const from = before === undefined || before.comment !== e.comment ? 0 : before.packets;
      const delta = e.packets >= from ? e.packets - from : e.packets;
      now.set(e.key, e);
      const total = this.#totals.get(e.comment);
      if (total === undefined || delta > 0) this.#totals.set(e.comment, (total ?? 0) + delta);
    }
    this.#last = seen;
    if (this.#sorted.length !== this.#totals.size) {
      // A new service port: the names are parsed and sorted once, not at every scrape.
      this.#sorted = [...this.#totals.keys()].sort().map((comment) => ({
        comment,
        name: parsePortComment(comment)!,
      }));
    }
    return this.#sorted.map(({ comment, name: { namespace, service, port } }) => ({
      namespace,
      service,
      port,
      connections: this.#totals.get(comment)!,
    }));
  }
}

/**
 * A reader of the same counted elements straight from the kernel over netlink
 * ({@link dumpSetElements}): no `nft` child and no whole-table cache, ~4× less CPU per read
 * than {@link nftServiceCounterReader} at 10k services. Falls back to that reader for good
 * where netlink cannot be used from here (no FFI permission, no libc). The key is the
 * element's bytes, one character each: it only tells entry points apart.
 */
export function netlinkServiceCounterReader(
  table: string,
  options: NftRunnerOptions & { families?: readonly string[] } = {},
): ElementCountReader {
  const families = options.families ?? ["ip", "ip6"];
  /** Whether each comment seen names a service port: the same few thousand at every scrape. */
  const portComment = new Map<string, boolean>();
  return netlinkOr(async () => {
    const out: ElementCount[] = [];
    for (const family of families) {
      for (const map of COUNTED_MAPS) {
        for (const e of await dumpSetElements(family, table, map)) {
          if (e.packets === undefined) continue;
          let named = portComment.get(e.comment);
          if (named === undefined) {
            named = parsePortComment(e.comment) !== undefined;
            portComment.set(e.comment, named);
          }
          if (named) {
            out.push({ family, map, key: latin1(e.key), comment: e.comment, packets: e.packets });
          }
        }
      }
    }
    return out;
  }, nftServiceCounterReader(table, options));
}

/** An element's key bytes as a string of one character per byte: an identity, not for reading. */
function latin1(bytes: Uint8Array): string {
  return String.fromCharCode.apply(null, bytes as unknown as number[]);
}
