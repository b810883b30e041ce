/**
 * Stale UDP conntrack cleanup after a sync, like upstream kube-proxy's
 * (`pkg/proxy/conntrack`): a pure planner comparing what two syncs programmed, and a runner
 * that executes the plan with the `conntrack` tool (argument arrays, never a shell).
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
 * Only UDP, as upstream (TCP and SCTP flows end by themselves and are refused or reset).
 * Endpoints count while they are serving, whatever the traffic policies or topology: a policy
 * change must not break existing flows (upstream's rule).
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
import ipaddr from "ipaddr.js";
import type { Endpoint } from "../model/endpoint.ts";
import type { Protocol, ServicePort } from "../model/service_port.ts";
import { runProgram } from "./program.ts";

/** One service address and port as conntrack cleanup sees it, with its serving endpoints. */
export interface ConntrackService {
  /** A cluster IP, external IP or load-balancer IP of the service port. */
  readonly serviceIP: string;
  readonly port: number;
  /** Only `UDP` records are acted on. */
  readonly protocol: Protocol;
  /** The service port's node port, or 0. */
  readonly nodePort: number;
  /** IPs of its serving endpoints (those of another family than `serviceIP` are ignored). */
  readonly endpoints: readonly string[];
}

/** Why a {@link CleanupCommand} deletes flows. */
export type CleanupReason = "stale-endpoint" | "stuck-without-endpoints";

/** One `conntrack -D` invocation: every given field must match the flows it deletes. */
export interface CleanupCommand {
  readonly family: "ipv4" | "ipv6";
  readonly reason: CleanupReason;
  /** Original destination address (the service IP); absent for node-port commands. */
  readonly origDst?: string;
  /** Original destination port (service port or node port). */
  readonly origPortDst: number;
  /** Reply source address: the stale endpoint, or the service IP for a stuck flow. */
  readonly replySrc?: string;
  /** Reply source port: the node port, for a stuck node-port flow. */
  readonly replyPortSrc?: number;
}

/**
 * The `conntrack` arguments of a command (without the program name).
 *
 * @example
 * ```ts
 * conntrackArgs({ family: "ipv4", reason: "stale-endpoint", origDst: "10.96.0.10",
 *   origPortDst: 53, replySrc: "10.244.1.11" });
 * // ["-D", "-f", "ipv4", "-p", "udp", "--orig-dst", "10.96.0.10", "--orig-port-dst", "53",
 * //  "--reply-src", "10.244.1.11"]
 * ```
 */
export function conntrackArgs(command: CleanupCommand): string[] {
  const args = ["-D", "-f", command.family, "-p", "udp"];
  if (command.origDst !== undefined) args.push("--orig-dst", command.origDst);
  args.push("--orig-port-dst", `${command.origPortDst}`);
  if (command.replySrc !== undefined) args.push("--reply-src", command.replySrc);
  if (command.replyPortSrc !== undefined) args.push("--reply-port-src", `${command.replyPortSrc}`);
  return args;
}

type Family = "ipv4" | "ipv6";

/** Canonical text and family of an address, or undefined when it is not one. */
function canonical(text: string): { ip: string; family: Family } | undefined {
  if (!ipaddr.isValid(text)) return undefined;
  const addr = ipaddr.process(text);
  return { ip: addr.toString(), family: addr.kind() };
}

/** Serving endpoint IPs per target: `family ip port` and `family nodePort` keys. */
interface Targets {
  readonly byAddress: Map<string, { family: Family; ip: string; port: number; eps: Set<string> }>;
  readonly byNodePort: Map<string, { family: Family; nodePort: number; eps: Set<string> }>;
}

function targetsOf(records: readonly ConntrackService[]): Targets {
  const targets: Targets = { byAddress: new Map(), byNodePort: new Map() };
  for (const record of records) {
    if (record.protocol !== "UDP") continue;
    const service = canonical(record.serviceIP);
    if (service === undefined) continue;
    const eps = record.endpoints.flatMap((e) => {
      const ep = canonical(e);
      return ep && ep.family === service.family ? [ep.ip] : [];
    });
    const addressKey = `${service.family} ${service.ip} ${record.port}`;
    const byAddress = targets.byAddress.get(addressKey) ??
      { family: service.family, ip: service.ip, port: record.port, eps: new Set<string>() };
    eps.forEach((ep) => byAddress.eps.add(ep));
    targets.byAddress.set(addressKey, byAddress);
    if (record.nodePort > 0) {
      const nodePortKey = `${service.family} ${record.nodePort}`;
      const byNodePort = targets.byNodePort.get(nodePortKey) ??
        { family: service.family, nodePort: record.nodePort, eps: new Set<string>() };
      eps.forEach((ep) => byNodePort.eps.add(ep));
      targets.byNodePort.set(nodePortKey, byNodePort);
    }
  }
  return targets;
}

/**
 * Plans the conntrack deletions a sync needs, from the service addresses the previous sync
 * programmed (`before`) and those this sync programmed (`after`). A record missing on one side
 * counts as "no endpoints" there (a new or deleted service). The result is deduplicated and
 * sorted; it is empty when no UDP endpoint went away and no UDP service gained its first ones.
 *
 * - each endpoint in `before` but not in `after` for the same service IP:port gets a
 *   `stale-endpoint` command; the same per node port (flows to any node address);
 * - each service IP:port (or node port) with no endpoints before and some after gets a
 *   `stuck-without-endpoints` command, deleting only flows that were not DNATed.
 *
 * @example
 * ```ts
 * planConntrackCleanup([], [{ serviceIP: "10.96.0.10", port: 53, protocol: "UDP",
 *   nodePort: 0, endpoints: ["10.244.1.11"] }]);
 * // [{ family: "ipv4", reason: "stuck-without-endpoints", origDst: "10.96.0.10",
 * //    origPortDst: 53, replySrc: "10.96.0.10" }]
 * ```
 */
export function planConntrackCleanup(
  before: readonly ConntrackService[],
  after: readonly ConntrackService[],
): CleanupCommand[] {
  const old = targetsOf(before);
  const now = targetsOf(after);
  const commands: CleanupCommand[] = [];
  for (const key of new Set([...old.byAddress.keys(), ...now.byAddress.keys()])) {
    const was = old.byAddress.get(key);
    const is = now.byAddress.get(key);
    const { family, ip, port } = (was ?? is)!;
    const stale = [...(was?.eps ?? [])].filter((ep) => !is?.eps.has(ep));
    for (const ep of stale) {
      commands.push({
        family,
        reason: "stale-endpoint",
        origDst: ip,
        origPortDst: port,
        replySrc: ep,
      });
    }
    if ((was?.eps.size ?? 0) === 0 && (is?.eps.size ?? 0) > 0) {
      commands.push({
        family,
        reason: "stuck-without-endpoints",
        origDst: ip,
        origPortDst: port,
        replySrc: ip,
      });
    }
  }
  for (const key of new Set([...old.byNodePort.keys(), ...now.byNodePort.keys()])) {
    const was = old.byNodePort.get(key);
    const is = now.byNodePort.get(key);
    const { family, nodePort } = (was ?? is)!;
    const stale = [...(was?.eps ?? [])].filter((ep) => !is?.eps.has(ep));
    for (const ep of stale) {
      commands.push({ family, reason: "stale-endpoint", origPortDst: nodePort, replySrc: ep });
    }
    if ((was?.eps.size ?? 0) === 0 && (is?.eps.size ?? 0) > 0) {
      commands.push({
        family,
        reason: "stuck-without-endpoints",
        origPortDst: nodePort,
        replyPortSrc: nodePort,
      });
    }
  }
  const unique = new Map(commands.map((c) => [conntrackArgs(c).join(" "), c]));
  return [...unique.keys()].sort().map((k) => unique.get(k)!);
}

/**
 * The {@link ConntrackService} records of the proxy state's UDP service ports: one per cluster
 * IP, external IP and load-balancer IP, with the IPs of its serving endpoints. With `keys`,
 * only those service port keys (e.g. the ones a partial sync changed).
 *
 * @example
 * ```ts
 * const records = conntrackServices(state.services, state.endpoints);
 * ```
 */
export function conntrackServices(
  services: ReadonlyMap<string, ServicePort>,
  endpoints: ReadonlyMap<string, readonly Endpoint[]>,
  options: { keys?: Iterable<string> } = {},
): ConntrackService[] {
  const records: ConntrackService[] = [];
  for (const key of options.keys ?? services.keys()) {
    const sp = services.get(key);
    if (sp === undefined || sp.name.protocol !== "UDP") continue;
    const serving = (endpoints.get(key) ?? []).filter((ep) => ep.serving).map((ep) => ep.ip);
    for (const ip of new Set([...sp.clusterIPs, ...sp.externalIPs, ...sp.loadBalancerIPs])) {
      records.push({
        serviceIP: ip,
        port: sp.port,
        protocol: "UDP",
        nodePort: sp.nodePort,
        endpoints: serving,
      });
    }
  }
  return records;
}

/**
 * Remembers what the last successful sync programmed, so each sync plans only the difference:
 * call {@link plan} after every successful sync that changed something.
 *
 * The first plan compares with nothing, so it only deletes flows that were never DNATed (e.g.
 * created before the proxy's rules existed); endpoints removed while the proxy was down are not
 * known to it.
 */
export class ConntrackCleanupTracker {
  /** Records of the last plan, by service port key. */
  readonly #last = new Map<string, ConntrackService[]>();

  /**
   * Plans the cleanup for the state just synced. With `changed` (service port keys), only those
   * ports are compared (a partial sync); without it, every port (a full sync).
   */
  plan(
    services: ReadonlyMap<string, ServicePort>,
    endpoints: ReadonlyMap<string, readonly Endpoint[]>,
    options: { changed?: ReadonlySet<string> } = {},
  ): CleanupCommand[] {
    const keys = options.changed ?? new Set([...this.#last.keys(), ...services.keys()]);
    const before: ConntrackService[] = [];
    const after: ConntrackService[] = [];
    for (const key of keys) {
      before.push(...(this.#last.get(key) ?? []));
      const current = conntrackServices(services, endpoints, { keys: [key] });
      after.push(...current);
      if (current.length > 0) this.#last.set(key, current);
      else this.#last.delete(key);
    }
    return planConntrackCleanup(before, after);
  }
}

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
