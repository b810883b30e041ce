/**
 * The trace table: `inet <table>-trace`, which `trace` creates for as long as it runs. Its two
 * chains sit on prerouting and output at priority -199 — after conntrack (-200), so they can
 * pick new connections only, and before every chain of ours (-110 and later) — and set
 * `meta nftrace` on the first packet of each selected new connection, at most a few a second.
 * They never accept, drop or change a packet, so forwarding is the same with or without them.
 *
 * The table's comment names its owner (`pid=… start=… pidns=… until=…`: the process id, its
 * start time in clock ticks from /proc/PID/stat, its pid namespace and the end of its timeout),
 * so a leftover of a killed `trace` is told apart from a running one: the daemon's full sync and
 * the next `trace` delete it only when that process is gone (or, seen from another pid
 * namespace, when its timeout is over). Pure except the last three functions, which read /proc.
 *
 * @module
 */

/** Which packets to trace: at least one of the two. */
export interface TraceSelector {
  /** Destination address (canonical). */
  readonly to?: string;
  /** Destination port (needs `protocol`). */
  readonly port?: number;
  readonly protocol?: "tcp" | "udp" | "sctp";
  /** Source network, `ADDR/LEN` or an address. */
  readonly from?: string;
}

/** New connections traced per second at most (a burst of as many). */
export const TRACE_RATE_PER_SECOND = 20;

/** The priority of the trace chains: right after conntrack, before anything of ours. */
export const TRACE_PRIORITY = -199;

/** The trace table's name for our table's name. */
export function traceTableName(table: string): string {
  return `${table}-trace`;
}

/** Who owns a trace table. */
export interface TraceOwner {
  readonly pid: number;
  /** The process's start time (field 22 of /proc/PID/stat). */
  readonly start: string;
  /** Its pid namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`). */
  readonly pidns: string;
  /** When its `--timeout` ends at the latest, in Unix seconds. */
  readonly until: number;
}

/** The comment recording the owner. */
export function ownerComment(owner: TraceOwner): string {
  return `kube-nftproxy trace pid=${owner.pid} start=${owner.start} pidns=${owner.pidns} ` +
    `until=${owner.until}`;
}

/** The owner recorded in a listing of the trace table (`nft list table inet …`); null if none. */
export function ownerOf(listing: string): TraceOwner | null {
  const m = /comment "kube-nftproxy trace pid=(\d+) start=(\d+) pidns=(\S+) until=(\d+)"/.exec(
    listing,
  );
  return m === null ? null : { pid: Number(m[1]), start: m[2], pidns: m[3], until: Number(m[4]) };
}

/**
 * Whether a trace table's owner may still be tracing: it runs (same pid and start time) when it
 * is in our pid namespace; otherwise (it cannot be seen from here) until its timeout is over.
 * A table without a readable owner is a leftover.
 */
export function ownerLive(
  owner: TraceOwner | null,
  here: { readonly pidns: string; readonly nowSeconds: number; readonly startOf: string | null },
): boolean {
  if (owner === null) return false;
  if (owner.pidns !== here.pidns) return here.nowSeconds <= owner.until;
  return here.startOf === owner.start;
}

/** The nft match for the selector in one family, or null when it cannot match that family. */
function familyMatch(selector: TraceSelector, family: "ip" | "ip6"): string | null {
  const parts: string[] = [];
  for (const [addr, field] of [[selector.from, "saddr"], [selector.to, "daddr"]] as const) {
    if (addr === undefined) continue;
    if (addr.includes(":") !== (family === "ip6")) return null;
    parts.push(`${family} ${field} ${addr}`);
  }
  if (parts.length === 0) parts.push(`meta nfproto ${family === "ip" ? "ipv4" : "ipv6"}`);
  if (selector.protocol !== undefined) parts.push(`meta l4proto ${selector.protocol}`);
  if (selector.port !== undefined) parts.push(`th dport ${selector.port}`);
  return parts.join(" ");
}

/**
 * The script creating the trace table (`create`: it fails when a trace table exists, so two
 * traces never share one).
 *
 * @example
 * ```ts
 * armScript("kube-nftproxy", { to: "10.96.0.10", port: 80, protocol: "tcp" }, owner);
 * ```
 */
export function armScript(table: string, selector: TraceSelector, owner: TraceOwner): string {
  const t = `inet ${traceTableName(table)}`;
  const lines = [`create table ${t} { comment "${ownerComment(owner)}"; }`];
  for (const hook of ["prerouting", "output"]) {
    lines.push(
      `add chain ${t} ${hook} { type filter hook ${hook} priority ${TRACE_PRIORITY}; policy accept; }`,
    );
    for (const family of ["ip", "ip6"] as const) {
      const match = familyMatch(selector, family);
      if (match === null) continue;
      lines.push(
        `add rule ${t} ${hook} ct state new ${match} ` +
          `limit rate ${TRACE_RATE_PER_SECOND}/second burst ${TRACE_RATE_PER_SECOND} packets ` +
          "meta nftrace set 1",
      );
    }
  }
  return lines.join("\n") + "\n";
}

/** The script deleting the trace table if it exists. */
export function disarmScript(table: string): string {
  const t = `inet ${traceTableName(table)}`;
  return `add table ${t}\ndelete table ${t}\n`;
}

/** The start time of process `pid` (field 22 of /proc/PID/stat), or null when it is gone. */
export async function processStartTime(pid: number): Promise<string | null> {
  let stat: string;
  try {
    stat = await Deno.readTextFile(`/proc/${pid}/stat`);
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces and parentheses: count from its last ")".
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return fields[19] ?? null;
}

/** This process's pid namespace, as /proc names it. */
export async function pidNamespace(): Promise<string> {
  return await Deno.readLink("/proc/self/ns/pid").catch(() => "unknown");
}

/** Whether the process that armed a trace may still be tracing (see {@link ownerLive}). */
export async function ownerAlive(owner: TraceOwner | null): Promise<boolean> {
  return ownerLive(owner, {
    pidns: await pidNamespace(),
    nowSeconds: Date.now() / 1000,
    startOf: owner === null ? null : await processStartTime(owner.pid),
  });
}
