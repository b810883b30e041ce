/**
 * Which stale UDP conntrack entries to delete after a sync, like upstream kube-proxy's
 * (`pkg/proxy/conntrack`): a pure planner comparing what two syncs programmed, and the tracker
 * that remembers the last sync between calls. conntrack.ts runs the commands it plans (see there
 * why UDP flows go stale).
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
 * ```
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import type { Endpoint } from "../model/endpoint.ts";
import type { Protocol, ServicePort } from "../model/service_port.ts";

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

/** A conntrack family, as `conntrack -f` spells it. */
export type Family = "ipv4" | "ipv6";

/** Canonical text and family of an address, or undefined when it is not one. */
export function canonical(text: string): { ip: string; family: Family } | undefined {
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
