/**
 * Service → service ports: validation and conversion of one v1 Service.
 *
 * The only code that reads raw Services. Like upstream (`newBaseServiceInfo` in
 * `pkg/proxy/serviceport.go`, `MapIPsByIPFamily` / `MapCIDRsByIPFamily` in `pkg/proxy/util`), a
 * bad field costs only itself: an invalid `externalIPs`, load-balancer ingress or
 * `loadBalancerSourceRanges` entry is skipped, addresses are read sloppily (leading zeros as
 * decimal, as the API server accepted them before its validation became strict), an unknown
 * session affinity means none, and a broken port is skipped while the Service's other ports
 * are programmed. Each skipped part is one warning naming the object and the field
 * (`ignoring part of Service default/web: spec.externalIPs[1] "1.2.3" is not a valid IP
 * address`). Only a Service with nothing to program — no name, no usable cluster IP, no ports
 * list — is refused, with one message (`cannot use Service default/web: …`): an API server
 * never stores one, so a Service it accepted always keeps its cluster IP in `cluster-ips`.
 *
 * @module
 */
import { parseAddress, parseCIDR } from "./ip.ts";
import { describe, get, getArray, getString, getStringMap, isObject, printable } from "./raw.ts";
import type { IPFamily, Protocol, ServicePort } from "./service_port.ts";

/** Label that hands a Service or EndpointSlice to another proxy: such objects are ignored. */
export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";
/** Label upstream sets on EndpointSlices of headless Services: such slices are ignored. */
export const HEADLESS_LABEL = "service.kubernetes.io/headless";

/** Default ClientIP affinity timeout (upstream: 3 hours). */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;

/**
 * The outcome of converting one Service: its ports (possibly none) and one warning per part
 * that was skipped, or why it was refused.
 */
export type ServiceConversion =
  | { ok: true; namespace: string; name: string; ports: ServicePort[]; warnings: string[] }
  | { ok: false; namespace: string; name: string; reason: string; message: string };

class Invalid extends Error {}

function fail(reason: string): never {
  throw new Invalid(reason);
}

/** Collects what a conversion skipped. */
type Warn = (reason: string) => void;

/**
 * Converts one raw v1 Service into its service ports.
 *
 * Services that the proxy must not program (headless, ExternalName, no cluster IP, labelled
 * for another proxy) convert to an empty port list, not an error.
 *
 * @example
 * ```ts
 * const result = convertService(rawService);
 * if (!result.ok) log(result.message);
 * else result.warnings.forEach(log);
 * ```
 */
export function convertService(raw: unknown): ServiceConversion {
  const namespace = getString(raw, ["metadata", "namespace"], "default") ?? "";
  const name = getString(raw, ["metadata", "name"]) ?? "";
  const who = `${printable(namespace || "?")}/${printable(name || "?")}`;
  const warnings: string[] = [];
  const warn: Warn = (reason) => warnings.push(`ignoring part of Service ${who}: ${reason}`);
  try {
    if (namespace === "") fail("metadata.namespace must be a non-empty string");
    if (name === "") fail("metadata.name must be a non-empty string");
    return { ok: true, namespace, name, ports: servicePorts(raw, namespace, name, warn), warnings };
  } catch (err) {
    if (!(err instanceof Invalid)) throw err;
    return {
      ok: false,
      namespace,
      name,
      reason: err.message,
      message: `cannot use Service ${who}: ${err.message}`,
    };
  }
}

const TYPES = ["ClusterIP", "NodePort", "LoadBalancer"] as const;

function servicePorts(raw: unknown, namespace: string, name: string, warn: Warn): ServicePort[] {
  if (getStringMap(raw, ["metadata", "labels"])[SERVICE_PROXY_NAME_LABEL] !== undefined) return [];
  const rawType = getString(raw, ["spec", "type"], "ClusterIP");
  if (rawType === "ExternalName") return [];
  const type = TYPES.find((t) => t === rawType) ?? "ClusterIP";
  if (type !== rawType) {
    warn(
      `spec.type is ${describe(get(raw, "spec", "type"))}, must be ClusterIP, NodePort, ` +
        "LoadBalancer or ExternalName: treated as ClusterIP",
    );
  }
  const clusterIPs = clusterIPsOf(raw, warn);
  if (clusterIPs === null) return [];
  const externalIPs = addresses(raw, ["spec", "externalIPs"], "spec.externalIPs", warn);
  const loadBalancerIPs = type === "LoadBalancer" ? ingressIPs(raw, warn) : [];
  const sourceRanges = sourceRangesOf(raw, warn);
  const sessionAffinity = affinityOf(raw, warn);
  const externallyAccessible = type !== "ClusterIP" || externalIPs.length > 0;
  const externalPolicyLocal = externallyAccessible &&
    getString(raw, ["spec", "externalTrafficPolicy"]) === "Local";
  const internalPolicyLocal = getString(raw, ["spec", "internalTrafficPolicy"]) === "Local";
  const healthCheckNodePort = type === "LoadBalancer" && externalPolicyLocal
    ? optionalPort(get(raw, "spec", "healthCheckNodePort"), "spec.healthCheckNodePort", warn)
    : 0;

  const rawPorts = getArray(raw, ["spec", "ports"]);
  if (rawPorts === null) {
    fail(`spec.ports is ${describe(get(raw, "spec", "ports"))}, must be a list`);
  }
  const seenNames = new Map<string, number>();
  const seenPorts = new Map<string, number>();
  return rawPorts.flatMap((p, i): ServicePort[] => {
    const at = `spec.ports[${i}]`;
    const skip = (reason: string) => (warn(`${reason}: port skipped`), []);
    if (!isObject(p)) return skip(`${at} is ${describe(p)}, must be an object`);
    const portName = getString(p, ["name"]);
    if (portName === null) return skip(`${at}.name is ${describe(p.name)}, must be a string`);
    const protocol = protocolOf(p.protocol);
    if (protocol === null) {
      return skip(`${at}.protocol is ${describe(p.protocol)}, must be TCP, UDP or SCTP`);
    }
    const port = portNumber(p.port);
    if (port === null || port === 0) {
      return skip(`${at}.port is ${describe(p.port)}, must be 1-65535`);
    }
    const nodePort = type === "ClusterIP" ? 0 : optionalPort(p.nodePort, `${at}.nodePort`, warn);
    const before = seenNames.get(portName);
    if (before !== undefined) {
      return skip(`${at}.name "${portName}" is also the name of spec.ports[${before}]`);
    }
    const portId = `${port}/${protocol}`;
    const samePort = seenPorts.get(portId);
    if (samePort !== undefined) {
      return skip(`${at} repeats port ${portId} of spec.ports[${samePort}]`);
    }
    seenNames.set(portName, i);
    seenPorts.set(portId, i);
    return [Object.freeze({
      name: Object.freeze({ namespace, name, port: portName, protocol }),
      type,
      port,
      clusterIPs,
      nodePort,
      externalIPs,
      loadBalancerIPs,
      loadBalancerSourceRanges: sourceRanges,
      sessionAffinity,
      externalPolicyLocal,
      internalPolicyLocal,
      healthCheckNodePort,
    })];
  });
}

/**
 * Cluster IPs, at most one per family (upstream's `GetClusterIPByFamily`), or null when the
 * Service has none to program (headless or unallocated). An unreadable entry is skipped; none
 * usable at all refuses the Service.
 */
function clusterIPsOf(raw: unknown, warn: Warn): readonly string[] | null {
  let list = getArray(raw, ["spec", "clusterIPs"]);
  if (list === null) {
    warn(`spec.clusterIPs is ${describe(get(raw, "spec", "clusterIPs"))}, must be a list`);
    list = [];
  }
  const single = getString(raw, ["spec", "clusterIP"]);
  if (single === null && list.length === 0) {
    fail(`spec.clusterIP is ${describe(get(raw, "spec", "clusterIP"))}, must be a string`);
  }
  const texts = list.length > 0 ? list : single === "" || single === null ? [] : [single];
  if (texts.length === 0 || texts[0] === "None" || texts[0] === "") return null;
  const field = list.length > 0 ? "spec.clusterIPs" : "spec.clusterIP";
  const byFamily = new Map<IPFamily, string>();
  const skipped: string[] = [];
  texts.forEach((t, i) => {
    const at = list.length > 0 ? `${field}[${i}]` : field;
    const parsed = parseAddress(t);
    if (!parsed.ok) return skipped.push(`${at} ${parsed.reason}`);
    if (byFamily.has(parsed.family)) {
      return skipped.push(`${at} "${parsed.address}" is a second ${parsed.family} cluster IP`);
    }
    byFamily.set(parsed.family, parsed.address);
  });
  if (byFamily.size === 0) fail(`${skipped.join("; ")}, and no other cluster IP is usable`);
  skipped.forEach(warn);
  return Object.freeze([...byFamily.values()]);
}

/** The valid addresses of a list field; every other entry is skipped with a warning. */
function addresses(raw: unknown, path: string[], field: string, warn: Warn): readonly string[] {
  const list = getArray(raw, path);
  if (list === null) {
    warn(`${field} is ${describe(get(raw, ...path))}, must be a list`);
    return Object.freeze([]);
  }
  return Object.freeze(list.flatMap((t, i) => {
    const parsed = parseAddress(t);
    if (parsed.ok) return [parsed.address];
    // Upstream skips empty entries without a word; so do we.
    if (typeof t !== "string" || t.trim() !== "") warn(`${field}[${i}] ${parsed.reason}`);
    return [];
  }));
}

/** Load-balancer ingress IPs, except `ipMode: Proxy` (upstream's `IsVIPMode`). */
function ingressIPs(raw: unknown, warn: Warn): readonly string[] {
  const ingress = getArray(raw, ["status", "loadBalancer", "ingress"]);
  if (ingress === null) {
    warn("status.loadBalancer.ingress must be a list");
    return Object.freeze([]);
  }
  const ips: string[] = [];
  ingress.forEach((entry, i) => {
    const ip = get(entry, "ip");
    if (ip === undefined || ip === "" || get(entry, "ipMode") === "Proxy") return;
    const parsed = parseAddress(ip);
    if (!parsed.ok) return warn(`status.loadBalancer.ingress[${i}].ip ${parsed.reason}`);
    ips.push(parsed.address);
  });
  return Object.freeze(ips);
}

/** `loadBalancerSourceRanges`, trimmed; invalid entries are skipped (`MapCIDRsByIPFamily`). */
function sourceRangesOf(raw: unknown, warn: Warn): readonly string[] {
  const list = getArray(raw, ["spec", "loadBalancerSourceRanges"]);
  if (list === null) {
    warn("spec.loadBalancerSourceRanges must be a list");
    return Object.freeze([]);
  }
  return Object.freeze(list.flatMap((t, i) => {
    const parsed = parseCIDR(t);
    if (parsed.ok) return [parsed.cidr];
    if (typeof t !== "string" || t.trim() !== "") {
      warn(`spec.loadBalancerSourceRanges[${i}] ${parsed.reason}`);
    }
    return [];
  }));
}

/** ClientIP affinity or null; anything but ClientIP is none, as upstream compares. */
function affinityOf(raw: unknown, warn: Warn): { timeoutSeconds: number } | null {
  const affinity = get(raw, "spec", "sessionAffinity") ?? "None";
  if (affinity === "None") return null;
  if (affinity !== "ClientIP") {
    warn(`spec.sessionAffinity is ${describe(affinity)}, must be None or ClientIP: none used`);
    return null;
  }
  const timeout = get(raw, "spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds") ??
    DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  if (typeof timeout !== "number" || !Number.isInteger(timeout) || timeout < 1 || timeout > 86400) {
    warn(
      `spec.sessionAffinityConfig.clientIP.timeoutSeconds is ${describe(timeout)}, must be ` +
        `1-86400: ${DEFAULT_AFFINITY_TIMEOUT_SECONDS} used`,
    );
    return Object.freeze({ timeoutSeconds: DEFAULT_AFFINITY_TIMEOUT_SECONDS });
  }
  return Object.freeze({ timeoutSeconds: timeout });
}

function protocolOf(value: unknown): Protocol | null {
  if (value === undefined || value === null) return "TCP";
  if (value === "TCP" || value === "UDP" || value === "SCTP") return value;
  return null;
}

/** A port number 1-65535, 0 when absent, null when invalid. */
function portNumber(value: unknown): number | null {
  if (value === undefined || value === null || value === 0) return 0;
  if (typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= 65535) {
    return value;
  }
  return null;
}

/** An optional port (node port, health-check port): an invalid one is reported and unused. */
function optionalPort(value: unknown, field: string, warn: Warn): number {
  const port = portNumber(value);
  if (port !== null) return port;
  warn(`${field} is ${describe(value)}, must be 1-65535: none used`);
  return 0;
}
