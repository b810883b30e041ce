/**
 * The `trace` command line: `main.ts trace --to ADDR[:PORT][/PROTO] | --from CIDR [--count N]
 * [--timeout DURATION] [--output text|json] [proxy flags…]`. Arms the trace table for the
 * selected new connections, reads `nft monitor trace`, and prints each traced connection named
 * by Service port and endpoint; removes the trace table when it ends (count reached, timeout,
 * SIGINT/SIGTERM). nft mode only.
 *
 * The kernel is reached through {@link TraceIO} (node_io.ts on a node), so the flow of the
 * command is the same in tests and on a node.
 *
 * @module
 */
import { parseGoDuration } from "../config/duration.ts";
import { parseCommandLine } from "../config/flags.ts";
import { canonicalAddress } from "../explain/explain.ts";
import { parseTraceLine, type TraceEvent } from "./events.ts";
import { type ConntrackEntry, elementComment, parseChainHooks } from "./kernel_text.ts";
import type { LeftoverOutcome } from "./leftover.ts";
import { type Flow, summarize, type TraceSummary } from "./summary.ts";
import {
  armScript,
  disarmScript,
  type TraceOwner,
  type TraceSelector,
  traceTableName,
} from "./table.ts";

/** What the command reads and changes. */
export interface TraceIO {
  /** Runs `nft` with arguments; resolves with its stdout, or throws. */
  nft(args: readonly string[]): Promise<string>;
  /** Applies an nft script as one transaction. */
  applyNft(script: string): Promise<void>;
  /** Deletes a leftover trace table (see leftover.ts). */
  removeLeftover(table: string): Promise<LeftoverOutcome>;
  /**
   * Starts `nft monitor trace`: its lines, until `stop()`; `ready` resolves once it listens (or
   * it cannot be told).
   */
  monitor(): {
    readonly lines: AsyncIterable<string>;
    readonly ready: Promise<void>;
    stop(): Promise<void>;
  };
  /** The conntrack entry of a flow (`conntrack -G`), or null. */
  conntrack(flow: Flow): Promise<ConntrackEntry | null>;
  /** Who this process is, for the trace table's comment (`until` is filled in here). */
  owner(): Promise<Omit<TraceOwner, "until">>;
  /** Resolves when SIGINT or SIGTERM arrives; `dispose` stops listening. */
  signalled(): { readonly promise: Promise<void>; dispose(): void };
  print(text: string): void;
  printError(line: string): void;
}

/** A traced connection as printed. */
export interface TracedConnection extends TraceSummary {
  /** `namespace/name:port` of the Service port, from our element comment or chain name. */
  readonly servicePort: string | null;
  /** The endpoint the connection was DNATed to, from conntrack (else as the trace saw it). */
  readonly endpoint: {
    readonly ip: string;
    readonly port: number | null;
    readonly from: "conntrack" | "trace";
  } | null;
  /** conntrack says the source address was rewritten. */
  readonly sourceRewritten: boolean | null;
}

const USAGE = `usage: kube-nftproxy trace (--to ADDR[:PORT][/PROTO] | --from CIDR) [options]

Follows real packets through the node's nft rules (nft mode only): arms tracing for the first
packet of each selected new connection, and prints per connection the hooks and chains it
passed, the rule that decided in each, the Service port and endpoint, masquerading, and the
verdict, including other tables' chains. Tracing is removed when the command ends.

  --to ADDR[:PORT][/PROTO]   destination (PROTO tcp, udp or sctp; default tcp with a port)
  --from CIDR                source address or network
  --count N                  stop after N connections (default 10)
  --timeout DURATION         stop after this long (default 30s)
  --output text|json         json: one object per connection and line
  proxy flags (--config, --mode, …) say which tables are ours, as for the daemon`;

/** Quiet time after a packet's last trace event before it is reported. */
const QUIET_MS = 300;

interface TraceFlags {
  to?: string;
  from?: string;
  count: number;
  timeoutMs: number;
  output: "text" | "json";
  help: boolean;
  rest: string[];
}

const OWN = ["--to", "--from", "--count", "--timeout", "--output"] as const;

function parseFlags(args: readonly string[]): TraceFlags {
  const own = new Map<string, string>();
  const rest: string[] = [];
  let help = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--help" || arg === "-h") {
      help = true;
      continue;
    }
    const flag = OWN.find((f) => arg === f || arg.startsWith(`${f}=`));
    if (flag === undefined) rest.push(arg);
    else if (arg === flag) {
      if (i + 1 >= args.length) throw new Error(`${flag} needs a value`);
      own.set(flag, args[++i]);
    } else own.set(flag, arg.slice(flag.length + 1));
  }
  const count = Number(own.get("--count") ?? "10");
  if (!Number.isInteger(count) || count < 1) throw new Error("--count: want a positive integer");
  const timeoutMs = parseGoDuration(own.get("--timeout") ?? "30s");
  if (!(timeoutMs > 0)) throw new Error("--timeout: want a positive duration");
  const output = own.get("--output") ?? "text";
  if (output !== "text" && output !== "json") {
    throw new Error(`--output ${output}: want text or json`);
  }
  return { to: own.get("--to"), from: own.get("--from"), count, timeoutMs, output, help, rest };
}

/**
 * Parses `--to ADDR[:PORT][/PROTO]` and `--from CIDR` into a selector; throws naming the
 * problem.
 */
export function parseSelector(to: string | undefined, from: string | undefined): TraceSelector {
  if (to === undefined && from === undefined) throw new Error("trace needs --to or --from");
  const selector: { -readonly [K in keyof TraceSelector]: TraceSelector[K] } = {};
  if (to !== undefined) {
    const m = /^(?:\[([^\]]+)\]|([^:/\[\]]+|[0-9a-f:]+))(?::(\d+))?(?:\/(tcp|udp|sctp))?$/i.exec(
      to.trim(),
    );
    if (m === null) throw new Error(`--to ${to}: want ADDRESS[:PORT][/tcp|udp|sctp]`);
    selector.to = canonicalAddress(m[1] ?? m[2], "--to");
    if (m[3] !== undefined) {
      const port = Number(m[3]);
      if (port < 1 || port > 65535) throw new Error(`--to ${to}: port out of range`);
      selector.port = port;
    }
    const proto = m[4]?.toLowerCase() as TraceSelector["protocol"];
    if (proto !== undefined) selector.protocol = proto;
    else if (selector.port !== undefined) selector.protocol = "tcp";
  }
  if (from !== undefined) {
    const [addr, len, extra] = from.trim().split("/");
    if (extra !== undefined) throw new Error(`--from ${from}: want ADDRESS or ADDRESS/LENGTH`);
    const address = canonicalAddress(addr, "--from");
    const max = address.includes(":") ? 128 : 32;
    if (len !== undefined && !(/^\d+$/.test(len) && Number(len) <= max)) {
      throw new Error(`--from ${from}: prefix length must be 0-${max}`);
    }
    selector.from = len === undefined ? address : `${address}/${len}`;
  }
  if (
    selector.to !== undefined && selector.from !== undefined &&
    selector.to.includes(":") !== selector.from.includes(":")
  ) {
    throw new Error("--to and --from are of different IP families");
  }
  return selector;
}

/**
 * Runs `trace` with the arguments after the word `trace`; resolves with the exit code (0
 * traced until count or timeout, 1 the kernel refused, 2 bad command line or not nft mode).
 *
 * @example
 * ```ts
 * await traceCommand(["--to", "10.96.0.10:80/tcp", "--count", "3"], nodeTraceIO());
 * ```
 */
export async function traceCommand(args: readonly string[], io: TraceIO): Promise<number> {
  let flags: TraceFlags;
  let selector: TraceSelector;
  let table: string;
  try {
    flags = parseFlags(args);
    if (flags.help) {
      io.print(USAGE);
      return 0;
    }
    selector = parseSelector(flags.to, flags.from);
    const { config } = await parseCommandLine(flags.rest);
    if (config.mode !== "nft") {
      throw new Error(
        `trace follows nft rules and works in nft mode only (this proxy is in ${config.mode} mode)`,
      );
    }
    table = config.tableName;
  } catch (err) {
    io.printError(`kube-nftproxy trace: ${(err as Error).message}`);
    return 2;
  }
  return await runTrace(io, { table, selector, flags });
}

async function runTrace(
  io: TraceIO,
  options: { table: string; selector: TraceSelector; flags: TraceFlags },
): Promise<number> {
  const { table, selector, flags } = options;
  const leftover = await io.removeLeftover(table);
  if (leftover === "live") {
    io.printError("kube-nftproxy trace: another trace is running on this node; try again later");
    return 1;
  }
  const owner: TraceOwner = {
    ...await io.owner(),
    until: Math.ceil((Date.now() + flags.timeoutMs) / 1000),
  };
  const monitor = io.monitor();
  const signal = io.signalled();
  let armed = false;
  try {
    // The monitor listens before the first traced packet can exist.
    await monitor.ready;
    await io.applyNft(armScript(table, selector, owner));
    armed = true;
    const hooks = parseChainHooks(await io.nft(["list", "chains"]));
    if (![...hooks.keys()].some((k) => k.startsWith(`ip ${table} `))) {
      io.printError(
        `kube-nftproxy trace: warning: no table ip ${table}: is the proxy running in nft mode?`,
      );
    }
    io.printError(
      `kube-nftproxy trace: tracing new connections ${describe(selector)} ` +
        `(up to ${flags.count}, ${flags.timeoutMs / 1000}s)`,
    );
    const reporter = new Reporter(io, { table, hooks, output: flags.output, count: flags.count });
    const reading = reporter.read(monitor.lines);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<void>((r) => timer = setTimeout(r, flags.timeoutMs));
    await Promise.race([reporter.done, timedOut, signal.promise, reading]);
    clearTimeout(timer);
    await reporter.flush();
    io.printError(`kube-nftproxy trace: ${reporter.reported} connection(s) traced`);
    return 0;
  } catch (err) {
    io.printError(`kube-nftproxy trace: ${(err as Error).message}`);
    return 1;
  } finally {
    signal.dispose();
    if (armed) await io.applyNft(disarmScript(table)).catch(() => {});
    await monitor.stop();
  }
}

function describe(s: TraceSelector): string {
  const parts: string[] = [];
  if (s.from !== undefined) parts.push(`from ${s.from}`);
  if (s.to !== undefined) {
    const addr = s.to.includes(":") ? `[${s.to}]` : s.to;
    parts.push(
      `to ${addr}${s.port !== undefined ? `:${s.port}` : ""}${s.protocol ? `/${s.protocol}` : ""}`,
    );
  }
  return parts.join(" ");
}

interface ReporterOptions {
  readonly table: string;
  readonly hooks: ReadonlyMap<string, string>;
  readonly output: "text" | "json";
  readonly count: number;
}

/** Collects trace events per packet and reports each connection once it is quiet. */
class Reporter {
  readonly #io: TraceIO;
  readonly #options: ReporterOptions;
  readonly #packets = new Map<
    string,
    { events: TraceEvent[]; timer?: ReturnType<typeof setTimeout> }
  >();
  readonly #seen = new Set<string>();
  readonly #pending = new Set<Promise<void>>();
  #printed: Promise<void> = Promise.resolve();
  #finish!: () => void;
  /** Resolves once `count` connections were reported. */
  readonly done = new Promise<void>((r) => this.#finish = r);
  reported = 0;

  constructor(io: TraceIO, options: ReporterOptions) {
    this.#io = io;
    this.#options = options;
  }

  async read(lines: AsyncIterable<string>): Promise<void> {
    for await (const line of lines) {
      const event = parseTraceLine(line);
      if (event === null || this.reported >= this.#options.count) continue;
      let packet = this.#packets.get(event.id);
      if (packet === undefined) {
        packet = { events: [] };
        this.#packets.set(event.id, packet);
      }
      packet.events.push(event);
      clearTimeout(packet.timer);
      packet.timer = setTimeout(() => this.#close(event.id), QUIET_MS);
    }
    throw new Error("nft monitor trace ended early");
  }

  /** Reports what is still open and waits for reports under way. */
  async flush(): Promise<void> {
    for (const [id, packet] of this.#packets) {
      clearTimeout(packet.timer);
      this.#close(id);
    }
    await Promise.all(this.#pending);
  }

  #close(id: string): void {
    const packet = this.#packets.get(id);
    if (packet === undefined) return;
    this.#packets.delete(id);
    const summary = summarize(packet.events, {
      table: this.#options.table,
      traceTable: traceTableName(this.#options.table),
      hooks: this.#options.hooks,
    });
    if (summary === null) return;
    const f = summary.flow;
    const key = `${f.protocol} ${f.source} ${f.sourcePort} ${f.destination} ${f.destinationPort}`;
    // A retransmitted first packet (a dropped SYN) is the same connection.
    if (this.#seen.has(key) || this.reported >= this.#options.count) return;
    this.#seen.add(key);
    this.reported++;
    const n = this.reported;
    // Looked up at once, printed in the order the connections were traced.
    const enriched = enrich(this.#io, this.#options.table, summary);
    const report = this.#printed = Promise.all([this.#printed, enriched])
      .then(([, connection]) => this.#print(connection, n));
    this.#pending.add(report);
    report.finally(() => this.#pending.delete(report));
    if (this.reported >= this.#options.count) report.then(() => this.#finish());
  }

  #print(connection: TracedConnection, n: number): void {
    if (this.#options.output === "json") this.#io.print(JSON.stringify(connection));
    else this.#io.print(formatConnection(connection, n));
  }
}

/** Adds the Service port (element comment) and the endpoint (conntrack) to a summary. */
async function enrich(io: TraceIO, table: string, s: TraceSummary): Promise<TracedConnection> {
  let servicePort: string | null = null;
  if (s.serviceLookup !== null) {
    const { family, set, key } = s.serviceLookup;
    servicePort = await io.nft(["get", "element", family, table, set, `{ ${key} }`])
      .then(elementComment, () => null);
  }
  servicePort ??= s.serviceChain;
  let endpoint: TracedConnection["endpoint"] = null;
  let sourceRewritten: boolean | null = null;
  if (s.verdict === "accepted") {
    const entry = await io.conntrack(s.flow).catch(() => null);
    if (entry !== null) {
      const { original, reply } = entry;
      if (reply.src !== original.dst || reply.sport !== original.dport) {
        endpoint = { ip: reply.src, port: reply.sport, from: "conntrack" };
      }
      sourceRewritten = reply.dst !== original.src;
    } else if (s.dnatSeen !== null) {
      endpoint = { ...s.dnatSeen, from: "trace" };
    }
  }
  return { ...s, servicePort, endpoint, sourceRewritten };
}

function hostPort(ip: string, port: number | null): string {
  const addr = ip.includes(":") ? `[${ip}]` : ip;
  return port === null ? addr : `${addr}:${port}`;
}

/** The human-readable form of one traced connection. */
export function formatConnection(c: TracedConnection, n: number): string {
  const f = c.flow;
  const lines = [
    `connection ${n}: ${f.protocol} ${hostPort(f.source, f.sourcePort)} → ` +
    hostPort(f.destination, f.destinationPort),
    `  hooks:       ${c.hooks.join(" → ") || "-"}`,
    "  chains:",
  ];
  for (const pass of c.chains) {
    const where = `${pass.table} ${pass.chain}${pass.hook ? ` (${pass.hook})` : ""}`;
    const tag = pass.ours ? "" : " [other table]";
    // `jump services → jump services` says it once.
    const decision = pass.rule === null
      ? pass.verdict
      : pass.rule.endsWith(pass.verdict)
      ? pass.rule
      : `${pass.rule} → ${pass.verdict}`;
    lines.push(`    ${where}${tag}: ${decision}`);
  }
  lines.push(`  service:     ${c.servicePort ?? "-"}`);
  if (c.endpoint !== null) {
    lines.push(
      `  endpoint:    ${hostPort(c.endpoint.ip, c.endpoint.port)} (from ${c.endpoint.from})`,
    );
  } else {
    lines.push("  endpoint:    -");
  }
  lines.push(`  masquerade:  ${c.masquerade ? `yes: ${c.masqueradeReason ?? "marked"}` : "no"}`);
  let verdict: string = c.verdict;
  if (c.decidedBy !== null) {
    const d = c.decidedBy;
    const whose = d.ours ? "" : " (another table, not kube-nftproxy)";
    verdict += ` by ${d.table} ${d.chain}${whose}: ${d.rule ?? d.verdict}`;
  }
  lines.push(`  verdict:     ${verdict}`);
  return lines.join("\n");
}
