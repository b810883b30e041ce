/**
 * Stale UDP conntrack cleanup after a sync, like upstream kube-proxy's
 * (`pkg/proxy/conntrack`): running the commands conntrack_plan.ts plans with the `conntrack`
 * tool (argument arrays, never a shell).
 *
 * Why: UDP has no connection end, so a conntrack entry lives as long as datagrams keep coming
 * (30 s unreplied, 120 s once replied, renewed by every packet). NAT is decided on a flow's
 * first packet only, so after a rule change an existing flow keeps its old fate:
 * - **stale endpoint**: a flow DNATed to an endpoint that is gone keeps going there (a
 *   black hole). Deleted: flows to the service IP:port (or to the node port) whose reply
 *   source is that endpoint (`--orig-dst SVC --orig-port-dst PORT --reply-src EP`).
 * - **stuck flow**: a flow that reached the service IP:port while it had no endpoints (no DNAT
 *   happened) stays un-NATed after endpoints appear. Deleted once the service has endpoints:
 *   flows to the service IP:port that were not DNATed (reply source is the service IP itself;
 *   for a node port, reply source port is the node port).
 *
 * @example
 * ```ts
 * const commands = planConntrackCleanup(
 *   [{ serviceIP: "10.96.0.10", port: 53, protocol: "UDP", nodePort: 0, endpoints: ["10.244.1.11"] }],
 *   [{ serviceIP: "10.96.0.10", port: 53, protocol: "UDP", nodePort: 0, endpoints: ["10.244.1.12"] }],
 * );
 * const deleted = await runConntrackCleanup(commands);
 * ```
 *
 * @module
 */
import { canonical, type CleanupCommand, conntrackArgs } from "./conntrack_plan.ts";
import { runProgram } from "./program.ts";

/** How `conntrack` is run. */
export interface ConntrackRunOptions {
  /** Run inside this network namespace (`ip netns exec NS conntrack …`); for tests. */
  netns?: string;
  /** The conntrack binary. Default `conntrack`. */
  conntrackPath?: string;
  /** Longest run of one command before it is killed. Default 10 000 ms. */
  timeoutMs?: number;
  /** Commands run at the same time (they are independent). Default 4. */
  concurrency?: number;
  /**
   * List the UDP entries first (`conntrack -L`, once per family) and run only the commands that
   * match one: one process instead of one per endpoint, since most removed endpoints have no
   * UDP flow at all. Default: when there are {@link LIST_FIRST_MIN_COMMANDS} commands or more.
   */
  listFirst?: boolean;
}

/** From this many commands on, {@link runConntrackCleanup} lists the entries first. */
export const LIST_FIRST_MIN_COMMANDS = 8;

/** A UDP conntrack entry, as far as the cleanup commands look at it. */
export interface UdpFlow {
  readonly origDst: string;
  readonly origPortDst: number;
  readonly replySrc: string;
  readonly replyPortSrc: number;
}

/**
 * Reads the UDP entries of `conntrack -L` output (plain or `-o extended`); other lines are
 * skipped. Addresses are canonical (as {@link planConntrackCleanup} writes them).
 *
 * @example
 * ```ts
 * parseUdpFlows("udp 17 29 src=192.168.77.2 dst=10.96.0.50 sport=40000 dport=80 " +
 *   "src=10.244.1.11 dst=192.168.77.2 sport=8080 dport=40000 [ASSURED] mark=0 use=1");
 * // [{ origDst: "10.96.0.50", origPortDst: 80, replySrc: "10.244.1.11", replyPortSrc: 8080 }]
 * ```
 */
export function parseUdpFlows(text: string): UdpFlow[] {
  const flows: UdpFlow[] = [];
  for (const line of text.split("\n")) {
    const tokens = line.trim().split(/\s+/);
    const proto = tokens.findIndex((t) => !/^(?:\[.*\]|ipv[46]|\d+)$/.test(t));
    if (tokens[proto] !== "udp") continue;
    const tuples: Record<string, string>[] = [];
    for (const token of tokens) {
      const eq = token.indexOf("=");
      if (eq < 0) continue;
      const key = token.slice(0, eq);
      if (key === "src") tuples.push({});
      if (tuples.length > 0 && !(key in tuples[tuples.length - 1])) {
        tuples[tuples.length - 1][key] = token.slice(eq + 1);
      }
    }
    const [orig, reply] = tuples;
    const origDst = canonical(orig?.dst ?? "");
    const replySrc = canonical(reply?.src ?? "");
    if (!origDst || !replySrc) continue;
    flows.push({
      origDst: origDst.ip,
      origPortDst: Number(orig.dport),
      replySrc: replySrc.ip,
      replyPortSrc: Number(reply.sport),
    });
  }
  return flows;
}

/** Whether `command` would delete `flow` (both of the same family). */
export function commandMatches(command: CleanupCommand, flow: UdpFlow): boolean {
  return flow.origPortDst === command.origPortDst &&
    (command.origDst === undefined || command.origDst === flow.origDst) &&
    (command.replySrc === undefined || command.replySrc === flow.replySrc) &&
    (command.replyPortSrc === undefined || command.replyPortSrc === flow.replyPortSrc);
}

/** `conntrack` could not be run, or refused or failed some commands. */
export class ConntrackError extends Error {
  /** Entries deleted by the commands that did succeed. */
  readonly deleted: number;
  /** Each failed command's arguments and conntrack's message. */
  readonly failures: readonly { readonly args: readonly string[]; readonly stderr: string }[];

  constructor(
    message: string,
    options: {
      deleted: number;
      failures: { args: readonly string[]; stderr: string }[];
      cause?: unknown;
    },
  ) {
    super(message, { cause: options.cause });
    this.name = "ConntrackError";
    this.deleted = options.deleted;
    this.failures = options.failures;
  }
}

/** The argv that runs one command, inside `options.netns` when given. */
export function conntrackCommandLine(
  command: CleanupCommand,
  options: ConntrackRunOptions = {},
): string[] {
  const program = [options.conntrackPath ?? "conntrack", ...conntrackArgs(command)];
  return options.netns === undefined ? program : ["ip", "netns", "exec", options.netns, ...program];
}

const DELETED = /(\d+) flow entries have been deleted/;

/**
 * Runs the commands (a few at a time, see `concurrency`) and returns how many entries they
 * deleted. "0 flow entries have been deleted" (exit code 1) is not an error. When some commands
 * fail, the others still run, then a {@link ConntrackError} reports the failures and the count
 * deleted; when `conntrack` cannot be started at all, no further command is started and that
 * error is thrown.
 *
 * @example
 * ```ts
 * const deleted = await runConntrackCleanup(commands, { netns: "knp-1a2b3c-node" });
 * ```
 */
export async function runConntrackCleanup(
  commands: readonly CleanupCommand[],
  options: ConntrackRunOptions = {},
): Promise<number> {
  const listFirst = options.listFirst ?? commands.length >= LIST_FIRST_MIN_COMMANDS;
  const toRun = listFirst ? await onlyMatching(commands, options) : commands;
  let deleted = 0;
  const failures: { args: string[]; stderr: string }[] = [];
  let spawnError: ConntrackError | undefined;
  let next = 0;
  const worker = async () => {
    while (next < toRun.length && spawnError === undefined) {
      const command = toRun[next++];
      const argv = conntrackCommandLine(command, options);
      let result: { code: number; stderr: string; timedOut: boolean };
      try {
        result = await runProgram(argv, {
          timeoutMs: options.timeoutMs ?? 10_000,
          discardStdout: true,
        });
      } catch (err) {
        spawnError ??= new ConntrackError(
          `cannot run ${argv[0]}: ${(err as Error).message}`,
          { deleted, failures, cause: err },
        );
        return;
      }
      const count = Number(DELETED.exec(result.stderr)?.[1] ?? NaN);
      if (!result.timedOut && (result.code === 0 || result.code === 1) && count >= 0) {
        deleted += count;
      } else {
        const why = result.timedOut ? "timed out" : `exit code ${result.code}`;
        failures.push({ args: conntrackArgs(command), stderr: `${why}: ${result.stderr.trim()}` });
      }
    }
  };
  const workers = Math.max(1, Math.min(options.concurrency ?? 4, toRun.length));
  await Promise.all(Array.from({ length: workers }, worker));
  if (spawnError !== undefined) throw spawnError;
  if (failures.length > 0) {
    const first = failures[0];
    throw new ConntrackError(
      `conntrack failed ${failures.length} of ${toRun.length} cleanup commands ` +
        `(first: conntrack ${first.args.join(" ")}: ${first.stderr})`,
      { deleted, failures },
    );
  }
  return deleted;
}

/**
 * The commands that match an entry of the current table. When listing fails, all of them:
 * running a command that finds nothing costs time, skipping a needed one breaks a flow.
 */
async function onlyMatching(
  commands: readonly CleanupCommand[],
  options: ConntrackRunOptions,
): Promise<readonly CleanupCommand[]> {
  const kept: CleanupCommand[] = [];
  for (const family of ["ipv4", "ipv6"] as const) {
    const ofFamily = commands.filter((c) => c.family === family);
    if (ofFamily.length === 0) continue;
    const program = [options.conntrackPath ?? "conntrack", "-L", "-f", family, "-p", "udp"];
    const argv = options.netns === undefined
      ? program
      : ["ip", "netns", "exec", options.netns, ...program];
    let flows: UdpFlow[] | undefined;
    try {
      const result = await runProgram(argv, { timeoutMs: options.timeoutMs ?? 10_000 });
      if (result.code === 0 && !result.timedOut) flows = parseUdpFlows(result.stdout);
    } catch {
      // the delete commands will report it
    }
    kept.push(
      ...(flows === undefined
        ? ofFamily
        : ofFamily.filter((c) => flows.some((f) => commandMatches(c, f)))),
    );
  }
  return kept;
}
