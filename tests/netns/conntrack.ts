/**
 * Reading a test namespace's connection tracking table: list entries (`conntrack -L`) and watch
 * NEW events as they happen (`conntrack -E`), both parsed into typed records.
 *
 * Two kernel facts shape how tests use this:
 * - A namespace tracks nothing until some rule in it uses conntrack (`ct …`, `nat` chains); the
 *   proxy's table does that. Before the proxy runs, call {@link enableConntrack}.
 * - An entry whose only reply was a RST is deleted at once, so a refused TCP connection never
 *   shows up in a listing afterwards: watch events ({@link watchConntrackEvents}) instead.
 *
 * @example
 * ```ts
 * const watch = await watchConntrackEvents(topo.node.ns);
 * await probe(topo, topo.client.ns, "10.96.0.10:80", { count: 5 });
 * const events = await watch.stop();
 * const backends = events.map((e) => e.reply.src); // the pod each connection went to
 * ```
 *
 * @module
 */

import ipaddr from "ipaddr.js";
import { run, runOk, startProcess } from "./netns.ts";

/** One direction of a tracked connection. Ports are absent for port-less protocols (ICMP). */
export interface ConntrackTuple {
  src: string;
  dst: string;
  sport?: number;
  dport?: number;
}

/** One conntrack entry or event. */
export interface ConntrackRecord {
  /** `ipv4` or `ipv6` (absent when the output did not say). */
  family?: string;
  /** Protocol name as conntrack prints it: `tcp`, `udp`, `sctp`, `icmp`, `icmpv6`, … */
  proto: string;
  /** Seconds until the entry expires (absent on DESTROY events). */
  timeout?: number;
  /** TCP/SCTP state such as `SYN_SENT` or `TIME_WAIT`. */
  state?: string;
  /** As the first packet saw it: `dst` is the address the client asked for (e.g. a ClusterIP). */
  orig: ConntrackTuple;
  /** As the reply is expected: `src` is where the connection really went (e.g. the pod). */
  reply: ConntrackTuple;
  /** `ASSURED`, `UNREPLIED`, … */
  flags: string[];
  /** The connection mark, when printed. */
  mark?: number;
  /** The event type (`NEW`, `UPDATE`, `DESTROY`) for lines from `conntrack -E`. */
  event?: string;
}

/** Which entries {@link listConntrack} returns; every given field must match. */
export interface ConntrackFilter {
  /** Original destination address (the address the client connected to), any notation. */
  dst?: string;
  /** Protocol name (`tcp`, `udp`, …). */
  proto?: string;
  /** Original destination port. */
  dport?: number;
}

/**
 * Parses one line of `conntrack -L` or `conntrack -E` output (plain or `-o extended`); returns
 * undefined for lines that are not entries.
 *
 * @example
 * ```ts
 * parseConntrackLine(
 *   "ipv4 2 tcp 6 118 TIME_WAIT src=192.168.77.2 dst=10.96.0.10 sport=40000 dport=80 " +
 *     "src=10.244.1.11 dst=192.168.77.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1",
 * )?.reply.src; // "10.244.1.11"
 * ```
 */
export function parseConntrackLine(line: string): ConntrackRecord | undefined {
  const tokens = line.trim().split(/\s+/).filter((t) => t !== "");
  let i = 0;
  let event: string | undefined;
  while (i < tokens.length && /^\[[^\]=]*\]$/.test(tokens[i]) && !isFlag(tokens[i])) {
    // "[NEW]" names an event; "[1700000000.123]" is a timestamp.
    const inner = tokens[i].slice(1, -1);
    if (/^[A-Z]+$/.test(inner)) event = inner;
    i++;
  }
  let family: string | undefined;
  if (tokens[i] === "ipv4" || tokens[i] === "ipv6") {
    family = tokens[i];
    i += 2;
  }
  const proto = tokens[i];
  if (proto === undefined || !/^\d+$/.test(tokens[i + 1] ?? "")) return undefined;
  i += 2;
  let timeout: number | undefined;
  if (/^\d+$/.test(tokens[i] ?? "")) timeout = Number(tokens[i++]);
  let state: string | undefined;
  if (tokens[i] !== undefined && !tokens[i].includes("=") && !tokens[i].startsWith("[")) {
    state = tokens[i++];
  }
  const tuples: Partial<ConntrackTuple>[] = [];
  const flags: string[] = [];
  let mark: number | undefined;
  for (; i < tokens.length; i++) {
    const token = tokens[i];
    if (token.startsWith("[") && token.endsWith("]")) {
      flags.push(token.slice(1, -1));
      continue;
    }
    const eq = token.indexOf("=");
    if (eq < 0) continue;
    const key = token.slice(0, eq);
    const value = token.slice(eq + 1);
    if (key === "src") tuples.push({ src: value });
    const tuple = tuples[tuples.length - 1];
    if (key === "dst" && tuple) tuple.dst = value;
    else if (key === "sport" && tuple) tuple.sport = Number(value);
    else if (key === "dport" && tuple) tuple.dport = Number(value);
    else if (key === "mark") mark = Number(value);
  }
  const [orig, reply] = tuples;
  if (!orig?.src || !orig.dst || !reply?.src || !reply.dst) return undefined;
  return {
    ...(family === undefined ? {} : { family }),
    proto,
    ...(timeout === undefined ? {} : { timeout }),
    ...(state === undefined ? {} : { state }),
    orig: orig as ConntrackTuple,
    reply: reply as ConntrackTuple,
    flags,
    ...(mark === undefined ? {} : { mark }),
    ...(event === undefined ? {} : { event }),
  };
}

function isFlag(token: string): boolean {
  return ["[ASSURED]", "[UNREPLIED]", "[OFFLOAD]", "[HW_OFFLOAD]"].includes(token);
}

/** Whether two textual addresses are the same address (`fd00::a` equals `fd00:0::000a`). */
function sameAddress(a: string, b: string): boolean {
  try {
    return ipaddr.parse(a).toNormalizedString() === ipaddr.parse(b).toNormalizedString();
  } catch {
    return a === b;
  }
}

/** Whether a record passes a filter. */
export function matchesFilter(record: ConntrackRecord, filter: ConntrackFilter): boolean {
  return (filter.dst === undefined || sameAddress(record.orig.dst, filter.dst)) &&
    (filter.proto === undefined || record.proto === filter.proto) &&
    (filter.dport === undefined || record.orig.dport === filter.dport);
}

/**
 * Lists the conntrack entries of namespace `ns` (both families), optionally filtered.
 *
 * @example
 * ```ts
 * const entries = await listConntrack(topo.node.ns, { dst: "10.96.0.10", proto: "udp" });
 * ```
 */
export async function listConntrack(
  ns: string,
  filter: ConntrackFilter = {},
): Promise<ConntrackRecord[]> {
  const out = await runOk(["conntrack", "-L", "-o", "extended"], { ns, timeoutMs: 10_000 });
  return out.split("\n").flatMap((line) => {
    const record = parseConntrackLine(line);
    return record && matchesFilter(record, filter) ? [record] : [];
  });
}

/** Name of the table {@link enableConntrack} loads. */
export const CONNTRACK_ENABLER_TABLE = "knp_harness_ct";

/**
 * Makes namespace `ns` track connections (both families) by loading a table whose only rule
 * reads the conntrack state and changes nothing. Not needed once the proxy's rules are loaded.
 */
export async function enableConntrack(ns: string): Promise<void> {
  const script = `table inet ${CONNTRACK_ENABLER_TABLE} {\n` +
    "  chain prerouting {\n" +
    "    type filter hook prerouting priority 0; policy accept;\n" +
    "    ct state new\n" +
    "  }\n" +
    "}\n";
  await runOk(["nft", "-f", "-"], { ns, stdin: script });
}

/** A running `conntrack -E` (see {@link watchConntrackEvents}). */
export interface ConntrackWatch {
  /** Events parsed so far (at most `maxEvents`). */
  readonly events: readonly ConntrackRecord[];
  /**
   * Resolves with the first event (already seen or still to come) matching `predicate`;
   * rejects after `timeoutMs` (default 5000) or when the watch ends.
   */
  waitFor(
    predicate: (e: ConntrackRecord) => boolean,
    timeoutMs?: number,
  ): Promise<ConntrackRecord>;
  /** Ends the watch and returns every event it saw. Idempotent. */
  stop(): Promise<ConntrackRecord[]>;
}

/** Options of {@link watchConntrackEvents}. */
export interface WatchOptions {
  /** Event types to report (`NEW`, `UPDATE`, `DESTROY`). Default `["NEW"]`. */
  events?: string[];
  /** Keep at most this many events. Default 10 000. */
  maxEvents?: number;
  /** Stop by itself after this long. Default 60 000 ms. */
  maxMs?: number;
}

/** Longest wait for `conntrack -E` to subscribe to the kernel's events. */
const SUBSCRIBE_TIMEOUT_MS = 5000;

/**
 * Starts `conntrack -E` in namespace `ns` and resolves once it is subscribed to the kernel's
 * events (so nothing after this call is missed). Events are collected until `stop()`, `maxMs` or
 * `maxEvents`. Events only occur while the namespace tracks connections (see
 * {@link enableConntrack}).
 */
export async function watchConntrackEvents(
  ns: string,
  opts: WatchOptions = {},
): Promise<ConntrackWatch> {
  const types = opts.events ?? ["NEW"];
  const maxEvents = opts.maxEvents ?? 10_000;
  const events: ConntrackRecord[] = [];
  const waiters = new Set<() => void>();
  let ended = false;
  const proc = startProcess(["conntrack", "-E", "-e", types.join(","), "-o", "extended"], {
    ns,
    keepBytes: 16 * 1024,
    onLine(line) {
      const record = parseConntrackLine(line);
      if (record && events.length < maxEvents) {
        events.push(record);
        for (const w of waiters) w();
      }
    },
  });
  let stopping: Promise<ConntrackRecord[]> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      clearTimeout(limit);
      await proc.stop(500);
      ended = true;
      for (const w of waiters) w();
      return [...events];
    })();
    return stopping;
  };
  const limit = setTimeout(stop, opts.maxMs ?? 60_000);
  proc.status.then(() => stop());

  try {
    await waitUntilSubscribed(proc.pid);
  } catch (err) {
    await stop();
    throw new Error(`cannot watch conntrack events in ${ns}: ${err}: ${proc.output()}`);
  }

  return {
    events,
    stop,
    waitFor(predicate, timeoutMs = 5000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = events.find(predicate);
          if (found) {
            done();
            resolve(found);
          } else if (ended) {
            done();
            reject(new Error("the conntrack watch ended before a matching event"));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`no matching conntrack event within ${timeoutMs} ms`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/**
 * Waits until process `pid` holds a netfilter netlink socket (protocol 12) that has joined a
 * multicast group: from then on the kernel queues every event for it.
 */
async function waitUntilSubscribed(pid: number): Promise<void> {
  const deadline = Date.now() + SUBSCRIBE_TIMEOUT_MS;
  while (Date.now() < deadline) {
    const inodes = new Set<string>();
    try {
      for await (const fd of Deno.readDir(`/proc/${pid}/fd`)) {
        const link = await Deno.readLink(`/proc/${pid}/fd/${fd.name}`).catch(() => "");
        const m = /^socket:\[(\d+)\]$/.exec(link);
        if (m) inodes.add(m[1]);
      }
      const table = await Deno.readTextFile(`/proc/${pid}/net/netlink`);
      const subscribed = table.split("\n").slice(1).some((row) => {
        const cols = row.trim().split(/\s+/);
        // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
        return cols[1] === "12" && /[1-9a-f]/i.test(cols[3] ?? "") && inodes.has(cols[9]);
      });
      if (subscribed) return;
    } catch (err) {
      throw new Error(`conntrack exited before subscribing (${err})`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`conntrack did not subscribe within ${SUBSCRIBE_TIMEOUT_MS} ms`);
}

/** Deletes every conntrack entry of namespace `ns` (e.g. between test cases). */
export async function flushConntrack(ns: string): Promise<void> {
  // Exit code 1 with "0 flow entries" just means the table was already empty.
  await run(["conntrack", "-F"], { ns, timeoutMs: 10_000 });
}
