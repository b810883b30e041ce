/**
 * EndpointSlice → endpoints: validation and conversion of discovery.k8s.io/v1 EndpointSlices,
 * and the merge of all slices of one Service into endpoints per service port.
 *
 * The only code that reads raw EndpointSlices. A slice that cannot be used at all (no name, no
 * `kubernetes.io/service-name` label, bad ports list) is refused whole with one message; a single
 * bad endpoint or port inside an otherwise good slice is dropped with a warning naming it, so one
 * broken address never takes the other endpoints down.
 *
 * @module
 */
import { parseAddress } from "./ip.ts";
import { describe, get, getArray, getString, getStringMap, isObject, printable } from "./raw.ts";
import { HEADLESS_LABEL, SERVICE_PROXY_NAME_LABEL } from "./convert_service.ts";
import type { Endpoint } from "./endpoint.ts";
import { type IPFamily, type Protocol, servicePortKey } from "./service_port.ts";

/** Annotation with the time of the change that caused this version of the slice. */
export const TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time";

/**
 * The slice's last-change trigger time in ms since the epoch, or null when absent or not a
 * valid RFC 3339 time (used for the network programming latency metric).
 */
export function sliceTriggerTime(raw: unknown): number | null {
  const text = getStringMap(raw, ["metadata", "annotations"])[TRIGGER_TIME_ANNOTATION];
  if (text === undefined || !/^\d{4}-\d\d-\d\dT/.test(text)) return null;
  const ms = Date.parse(text);
  return Number.isFinite(ms) ? ms : null;
}

/** Label naming the Service an EndpointSlice belongs to. */
export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";

/** One port of a slice. */
export interface SlicePort {
  readonly name: string;
  readonly protocol: Protocol;
  readonly port: number;
}

/** One endpoint of a slice, before it is paired with a port. */
export interface SliceEndpoint {
  readonly ip: string;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  readonly nodeName: string;
  readonly zone: string;
  readonly zoneHints: readonly string[] | null;
  readonly nodeHints: readonly string[] | null;
}

/** A validated EndpointSlice. */
export interface SliceInfo {
  readonly namespace: string;
  readonly name: string;
  readonly serviceName: string;
  readonly family: IPFamily;
  readonly ports: readonly SlicePort[];
  readonly endpoints: readonly SliceEndpoint[];
}

/** Outcome of converting one slice: the slice (null when it is to be ignored) or why not. */
export type SliceConversion =
  | { ok: true; slice: SliceInfo | null; warnings: string[] }
  | { ok: false; message: string };

/** Converts one raw EndpointSlice. */
export function convertEndpointSlice(raw: unknown): SliceConversion {
  const namespace = getString(raw, ["metadata", "namespace"], "default") ?? "";
  const name = getString(raw, ["metadata", "name"]) ?? "";
  const who = `EndpointSlice ${printable(namespace || "?")}/${printable(name || "?")}`;
  const refuse = (reason: string): SliceConversion => ({
    ok: false,
    message: `cannot use ${who}: ${reason}`,
  });
  if (namespace === "" || name === "") {
    return refuse("metadata.namespace and metadata.name are required");
  }
  const labels = getStringMap(raw, ["metadata", "labels"]);
  if (labels[SERVICE_PROXY_NAME_LABEL] !== undefined || labels[HEADLESS_LABEL] !== undefined) {
    return { ok: true, slice: null, warnings: [] };
  }
  const serviceName = labels[SERVICE_NAME_LABEL];
  if (serviceName === undefined || serviceName === "") {
    return refuse(`metadata.labels["${SERVICE_NAME_LABEL}"] is missing`);
  }
  const addressType = get(raw, "addressType");
  if (addressType === "FQDN") return { ok: true, slice: null, warnings: [] };
  if (addressType !== "IPv4" && addressType !== "IPv6") {
    return refuse(`addressType is ${describe(addressType)}, must be IPv4, IPv6 or FQDN`);
  }
  const rawPorts = getArray(raw, ["ports"]);
  const rawEndpoints = getArray(raw, ["endpoints"]);
  if (rawPorts === null) return refuse(`ports is ${describe(get(raw, "ports"))}, must be a list`);
  if (rawEndpoints === null) {
    return refuse(`endpoints is ${describe(get(raw, "endpoints"))}, must be a list`);
  }
  const warnings: string[] = [];
  const warn = (reason: string) => warnings.push(`ignoring part of ${who}: ${reason}`);
  const ports: SlicePort[] = [];
  rawPorts.forEach((p, i) => {
    const port = get(p, "port");
    const portName = getString(p, ["name"]);
    const protocol = get(p, "protocol") ?? "TCP";
    if (port === undefined || port === null) return; // upstream: a port without a number is unused
    if (typeof port !== "number" || !Number.isInteger(port) || port < 1 || port > 65535) {
      return warn(`ports[${i}].port is ${describe(port)}, must be 1-65535`);
    }
    if (portName === null) return warn(`ports[${i}].name is ${describe(get(p, "name"))}`);
    if (protocol !== "TCP" && protocol !== "UDP" && protocol !== "SCTP") {
      return warn(`ports[${i}].protocol is ${describe(protocol)}, must be TCP, UDP or SCTP`);
    }
    ports.push(Object.freeze({ name: portName, protocol, port }));
  });
  const endpoints: SliceEndpoint[] = [];
  rawEndpoints.forEach((e, i) => {
    if (!isObject(e)) return warn(`endpoints[${i}] is ${describe(e)}, must be an object`);
    const first = (getArray(e, ["addresses"]) ?? [])[0];
    const parsed = parseAddress(first);
    if (!parsed.ok) return warn(`endpoints[${i}].addresses[0] ${parsed.reason}`);
    if (parsed.family !== addressType) {
      return warn(`endpoints[${i}].addresses[0] "${first}" is not an ${addressType} address`);
    }
    endpoints.push(sliceEndpoint(e, parsed.address));
  });
  return {
    ok: true,
    warnings,
    slice: Object.freeze({
      namespace,
      name,
      serviceName,
      family: addressType,
      ports: Object.freeze(ports),
      endpoints: Object.freeze(endpoints),
    }),
  };
}

function sliceEndpoint(e: Record<string, unknown>, ip: string): SliceEndpoint {
  const conditions = e.conditions;
  const condition = (key: string) => {
    const value = isObject(conditions) ? conditions[key] : undefined;
    return typeof value === "boolean" ? value : undefined;
  };
  const ready = condition("ready") ?? true;
  const hints = e.hints;
  const hintNames = (key: string): readonly string[] | null => {
    const list = isObject(hints) ? hints[key] : undefined;
    if (!Array.isArray(list)) return null;
    return Object.freeze(
      list.map((h) => get(h, "name")).filter((n): n is string => typeof n === "string"),
    );
  };
  return Object.freeze({
    ip,
    ready,
    serving: condition("serving") ?? ready,
    terminating: condition("terminating") ?? false,
    nodeName: getString(e, ["nodeName"]) ?? "",
    zone: getString(e, ["zone"]) ?? "",
    zoneHints: hintNames("forZones"),
    nodeHints: hintNames("forNodes"),
  });
}

/**
 * Merges the slices of one Service into endpoints per service port key.
 *
 * Slices are visited in name order; an endpoint (`ip:port`) listed twice is kept once,
 * preferring a ready copy, as upstream's EndpointSliceCache does. `hostname` decides `isLocal`.
 */
export function mergeSlices(
  slices: Iterable<SliceInfo>,
  hostname: string,
): Map<string, Endpoint[]> {
  /** Per service port: its endpoints by `ip` (the first port number seen) or `ip|port`. */
  const byPort = new Map<string, { firstPort: number; endpoints: Map<string, Endpoint> }>();
  const sorted = [...slices].sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  for (const slice of sorted) {
    for (const port of slice.ports) {
      const key = servicePortKey({
        namespace: slice.namespace,
        name: slice.serviceName,
        port: port.name,
        protocol: port.protocol,
      });
      let entry = byPort.get(key);
      if (entry === undefined) {
        byPort.set(key, entry = { firstPort: port.port, endpoints: new Map() });
      }
      const { endpoints } = entry;
      // Slices nearly always agree on the number: their endpoints are told apart by address
      // alone, which spares building an `ip|port` string per endpoint.
      const plain = port.port === entry.firstPort;
      for (const ep of slice.endpoints) {
        const id = plain ? ep.ip : `${ep.ip}|${port.port}`;
        const existing = endpoints.get(id);
        if (existing !== undefined && (existing.ready || !ep.ready)) continue;
        // Written out rather than spread: one object shape, built several times faster.
        const endpoint: Endpoint = {
          ip: ep.ip,
          ready: ep.ready,
          serving: ep.serving,
          terminating: ep.terminating,
          nodeName: ep.nodeName,
          zone: ep.zone,
          zoneHints: ep.zoneHints,
          nodeHints: ep.nodeHints,
          port: port.port,
          isLocal: hostname !== "" && ep.nodeName === hostname,
        };
        endpoints.set(id, Object.freeze(endpoint));
      }
    }
  }
  const result = new Map<string, Endpoint[]>();
  for (const [key, { endpoints }] of byPort) result.set(key, [...endpoints.values()]);
  return result;
}
