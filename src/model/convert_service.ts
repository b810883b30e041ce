/**
 * Service → service ports: validation and conversion of one v1 Service.
 *
 * The only code that reads raw Services. A Service with any invalid field is refused whole,
 * with one message naming the object and the field (`cannot use Service default/web:
 * spec.ports[1].port is 70000, must be 1-65535`), so a bad object never half-programs a service.
 *
 * @module
 */
import { parseAddress, parseCIDR } from "./ip.ts";
import { describe, get, getArray, getString, getStringMap, isObject, printable } from "./raw.ts";
import type { Protocol, ServicePort } from "./service_port.ts";

/** Label that hands a Service or EndpointSlice to another proxy: such objects are ignored. */
export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";
/** Label upstream sets on EndpointSlices of headless Services: such slices are ignored. */
export const HEADLESS_LABEL = "service.kubernetes.io/headless";

/** Default ClientIP affinity timeout (upstream: 3 hours). */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;

/** The outcome of converting one Service: its ports (possibly none), or why it was refused. */
export type ServiceConversion =
  | { ok: true; namespace: string; name: string; ports: ServicePort[] }
  | { ok: false; namespace: string; name: string; reason: string; message: string };

class Invalid extends Error {}

function fail(reason: string): never {
  throw new Invalid(reason);
}

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
 * ```
 */
export function convertService(raw: unknown): ServiceConversion {
  const namespace = getString(raw, ["metadata", "namespace"], "default") ?? "";
  const name = getString(raw, ["metadata", "name"]) ?? "";
  try {
    if (namespace === "") fail("metadata.namespace must be a non-empty string");
    if (name === "") fail("metadata.name must be a non-empty string");
    return { ok: true, namespace, name, ports: servicePorts(raw, namespace, name) };
  } catch (err) {
    if (!(err instanceof Invalid)) throw err;
    const who = `${printable(namespace || "?")}/${printable(name || "?")}`;
    return {
      ok: false,
      namespace,
      name,
      reason: err.message,
      message: `cannot use Service ${who}: ${err.message}`,
    };
  }
}

function servicePorts(raw: unknown, namespace: string, name: string): ServicePort[] {
  if (getStringMap(raw, ["metadata", "labels"])[SERVICE_PROXY_NAME_LABEL] !== undefined) return [];
  const type = getString(raw, ["spec", "type"], "ClusterIP");
  if (type === "ExternalName") return [];
  if (type !== "ClusterIP" && type !== "NodePort" && type !== "LoadBalancer") {
    fail(
      `spec.type is ${describe(type)}, must be ClusterIP, NodePort, LoadBalancer or ExternalName`,
    );
  }
  const clusterIPs = clusterIPsOf(raw);
  if (clusterIPs === null) return [];
  const externalIPs = addresses(raw, ["spec", "externalIPs"], "spec.externalIPs");
  const loadBalancerIPs = type === "LoadBalancer" ? ingressIPs(raw) : [];
  const sourceRanges = sourceRangesOf(raw);
  const sessionAffinity = affinityOf(raw);
  const externallyAccessible = type !== "ClusterIP" || externalIPs.length > 0;
  const externalPolicyLocal = externallyAccessible &&
    getString(raw, ["spec", "externalTrafficPolicy"]) === "Local";
  const internalPolicyLocal = getString(raw, ["spec", "internalTrafficPolicy"]) === "Local";
  const healthCheckNodePort = type === "LoadBalancer" && externalPolicyLocal
    ? portNumber(get(raw, "spec", "healthCheckNodePort"), "spec.healthCheckNodePort", true)
    : 0;

  const rawPorts = getArray(raw, ["spec", "ports"]);
  if (rawPorts === null) {
    fail(`spec.ports is ${describe(get(raw, "spec", "ports"))}, must be a list`);
  }
  const seenNames = new Map<string, number>();
  const seenPorts = new Map<string, number>();
  return rawPorts.map((p, i): ServicePort => {
    const at = `spec.ports[${i}]`;
    if (!isObject(p)) fail(`${at} is ${describe(p)}, must be an object`);
    const portName = getString(p, ["name"]);
    if (portName === null) fail(`${at}.name is ${describe(p.name)}, must be a string`);
    const protocol = protocolOf(p.protocol, `${at}.protocol`);
    const port = portNumber(p.port, `${at}.port`, false);
    const nodePort = type === "ClusterIP" ? 0 : portNumber(p.nodePort, `${at}.nodePort`, true);
    const before = seenNames.get(portName);
    if (before !== undefined) {
      fail(`${at}.name "${portName}" is also the name of spec.ports[${before}]`);
    }
    seenNames.set(portName, i);
    const portId = `${port}/${protocol}`;
    const samePort = seenPorts.get(portId);
    if (samePort !== undefined) fail(`${at} repeats port ${portId} of spec.ports[${samePort}]`);
    seenPorts.set(portId, i);
    return Object.freeze({
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
    });
  });
}

/** Cluster IPs, or null when the Service has none to program (headless or unallocated). */
function clusterIPsOf(raw: unknown): readonly string[] | null {
  const list = getArray(raw, ["spec", "clusterIPs"]);
  if (list === null) {
    fail(`spec.clusterIPs is ${describe(get(raw, "spec", "clusterIPs"))}, must be a list`);
  }
  const single = getString(raw, ["spec", "clusterIP"]);
  if (single === null) {
    fail(`spec.clusterIP is ${describe(get(raw, "spec", "clusterIP"))}, must be a string`);
  }
  const texts = list.length > 0 ? list : single === "" ? [] : [single];
  if (texts.length === 0 || texts[0] === "None" || texts[0] === "") return null;
  const field = list.length > 0 ? "spec.clusterIPs" : "spec.clusterIP";
  const ips = texts.map((t, i) => {
    const parsed = parseAddress(t);
    if (!parsed.ok) fail(`${list.length > 0 ? `${field}[${i}]` : field} ${parsed.reason}`);
    return parsed;
  });
  if (ips.length > 2 || (ips.length === 2 && ips[0].family === ips[1].family)) {
    fail(`${field} must hold at most one address per IP family`);
  }
  return Object.freeze(ips.map((ip) => ip.address));
}

function addresses(raw: unknown, path: string[], field: string): readonly string[] {
  const list = getArray(raw, path);
  if (list === null) fail(`${field} is ${describe(get(raw, ...path))}, must be a list`);
  return Object.freeze(list.map((t, i) => {
    const parsed = parseAddress(t);
    if (!parsed.ok) fail(`${field}[${i}] ${parsed.reason}`);
    return parsed.address;
  }));
}

function ingressIPs(raw: unknown): readonly string[] {
  const ingress = getArray(raw, ["status", "loadBalancer", "ingress"]);
  if (ingress === null) fail("status.loadBalancer.ingress must be a list");
  const ips: string[] = [];
  ingress.forEach((entry, i) => {
    const ip = get(entry, "ip");
    if (ip === undefined || ip === "" || get(entry, "ipMode") === "Proxy") return;
    const parsed = parseAddress(ip);
    if (!parsed.ok) fail(`status.loadBalancer.ingress[${i}].ip ${parsed.reason}`);
    ips.push(parsed.address);
  });
  return Object.freeze(ips);
}

function sourceRangesOf(raw: unknown): readonly string[] {
  const list = getArray(raw, ["spec", "loadBalancerSourceRanges"]);
  if (list === null) fail("spec.loadBalancerSourceRanges must be a list");
  return Object.freeze(list.map((t, i) => {
    const parsed = parseCIDR(t);
    if (!parsed.ok) fail(`spec.loadBalancerSourceRanges[${i}] ${parsed.reason}`);
    return parsed.cidr;
  }));
}

function affinityOf(raw: unknown): { timeoutSeconds: number } | null {
  const affinity = getString(raw, ["spec", "sessionAffinity"], "None");
  if (affinity === "None") return null;
  if (affinity !== "ClientIP") {
    fail(`spec.sessionAffinity is ${describe(affinity)}, must be None or ClientIP`);
  }
  const timeout = get(raw, "spec", "sessionAffinityConfig", "clientIP", "timeoutSeconds") ??
    DEFAULT_AFFINITY_TIMEOUT_SECONDS;
  if (typeof timeout !== "number" || !Number.isInteger(timeout) || timeout < 1 || timeout > 86400) {
    fail(
      `spec.sessionAffinityConfig.clientIP.timeoutSeconds is ${describe(timeout)}, must be 1-86400`,
    );
  }
  return Object.freeze({ timeoutSeconds: timeout });
}

function protocolOf(value: unknown, field: string): Protocol {
  if (value === undefined || value === null) return "TCP";
  if (value === "TCP" || value === "UDP" || value === "SCTP") return value;
  return fail(`${field} is ${describe(value)}, must be TCP, UDP or SCTP`);
}

function portNumber(value: unknown, field: string, optional: boolean): number {
  if (optional && (value === undefined || value === null || value === 0)) return 0;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > 65535) {
    return fail(`${field} is ${describe(value)}, must be 1-65535`);
  }
  return value;
}
