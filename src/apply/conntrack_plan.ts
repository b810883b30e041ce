/**
 * Which stale UDP conntrack entries to delete, as upstream kube-proxy's conntrack reconciler
 * decides it (`CleanStaleEntries` in `pkg/proxy/conntrack/cleanup.go`, 1.32+): a pure function
 * of the table's UDP entries and the service addresses the proxy programs. conntrack.ts lists
 * the table and runs the deletions (see there why UDP flows go stale).
 *
 * Every UDP entry whose original destination is a service IP (cluster, external or load-balancer
 * IP of a UDP service port) or whose original destination port is a UDP node port, and whose
 * reply source is not a serving endpoint of it, is deleted: one that was DNATed to an endpoint
 * since gone (also while the proxy was down), and one that reached the service before it had
 * endpoints and was never DNATed. Only UDP, as upstream (TCP and SCTP flows end by themselves).
 * Endpoints count while they are serving, whatever the traffic policies or topology: a policy
 * change must not break existing flows (upstream's rule).
 *
 * @example
 * ```ts
 * const services = conntrackServices(state.services, state.endpoints);
 * planConntrackReconcile(parseUdpFlows(listing), services, "ipv4");
 * // [{ family: "ipv4", origDst: "10.96.0.10", replySrc: "10.244.1.11" }]
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

/**
 * One `conntrack -D` filter: every given field must match the flows it deletes (upstream's
 * `filterForNAT`: original destination and reply source; `filterForPortNAT`: original
 * destination port and reply source).
 */
export interface CleanupCommand {
  readonly family: Family;
  /** Original destination address (the service IP); absent for node-port commands. */
  readonly origDst?: string;
  /** Original destination port (the node port); absent for service-IP commands. */
  readonly origPortDst?: number;
  /** Reply source address: where the flow was DNATed (or the service IP, if it was not). */
  readonly replySrc: string;
}

/**
 * The `conntrack` arguments of a command (without the program name).
 *
 * @example
 * ```ts
 * conntrackArgs({ family: "ipv4", origDst: "10.96.0.10", replySrc: "10.244.1.11" });
 * // ["-D", "-f", "ipv4", "-p", "udp", "--orig-dst", "10.96.0.10", "--reply-src", "10.244.1.11"]
 * ```
 */
export function conntrackArgs(command: CleanupCommand): string[] {
  const args = ["-D", "-f", command.family, "-p", "udp"];
  if (command.origDst !== undefined) args.push("--orig-dst", command.origDst);
  if (command.origPortDst !== undefined) args.push("--orig-port-dst", `${command.origPortDst}`);
  args.push("--reply-src", command.replySrc);
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

/** A UDP conntrack entry, as far as the reconciler looks at it (canonical addresses). */
export interface UdpFlow {
  readonly origDst: string;
  readonly origPortDst: number;
  readonly replySrc: string;
  readonly replyPortSrc: number;
}

/**
 * The deletions that leave no UDP flow of `family` pointing anywhere but at a serving endpoint
 * of its service IP or node port (see the module doc). One command per distinct filter, sorted.
 * A service IP of several UDP ports allows the serving endpoints of all of them (upstream keeps
 * the last port's only, which could cut another port's flows).
 *
 * @example
 * ```ts
 * planConntrackReconcile(
 *   [{ origDst: "10.96.0.10", origPortDst: 53, replySrc: "10.244.1.9", replyPortSrc: 53 }],
 *   [{ serviceIP: "10.96.0.10", port: 53, protocol: "UDP", nodePort: 0, endpoints: ["10.244.1.11"] }],
 *   "ipv4",
 * );
 * // [{ family: "ipv4", origDst: "10.96.0.10", replySrc: "10.244.1.9" }]
 * ```
 */
export function planConntrackReconcile(
  flows: readonly UdpFlow[],
  services: readonly ConntrackService[],
  family: Family,
): CleanupCommand[] {
  const byAddress = new Map<string, Set<string>>();
  const byNodePort = new Map<number, Set<string>>();
  for (const record of services) {
    if (record.protocol !== "UDP") continue;
    const service = canonical(record.serviceIP);
    if (service === undefined || service.family !== family) continue;
    const eps = record.endpoints.flatMap((e) => {
      const ep = canonical(e);
      return ep && ep.family === family ? [ep.ip] : [];
    });
    const atAddress = byAddress.get(service.ip) ?? new Set<string>();
    eps.forEach((ep) => atAddress.add(ep));
    byAddress.set(service.ip, atAddress);
    if (record.nodePort > 0) {
      const atNodePort = byNodePort.get(record.nodePort) ?? new Set<string>();
      eps.forEach((ep) => atNodePort.add(ep));
      byNodePort.set(record.nodePort, atNodePort);
    }
  }
  const commands = new Map<string, CleanupCommand>();
  const add = (command: CleanupCommand) => commands.set(conntrackArgs(command).join(" "), command);
  for (const flow of flows) {
    const serving = byAddress.get(flow.origDst);
    if (serving !== undefined && !serving.has(flow.replySrc)) {
      add({ family, origDst: flow.origDst, replySrc: flow.replySrc });
    }
    const servingNodePort = byNodePort.get(flow.origPortDst);
    if (servingNodePort !== undefined && !servingNodePort.has(flow.replySrc)) {
      add({ family, origPortDst: flow.origPortDst, replySrc: flow.replySrc });
    }
  }
  return [...commands.keys()].sort().map((key) => commands.get(key)!);
}

/**
 * The {@link ConntrackService} records of the proxy state's UDP service ports: one per cluster
 * IP, external IP and load-balancer IP, with the IPs of its serving endpoints. With `keys`,
 * only those service port keys.
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
