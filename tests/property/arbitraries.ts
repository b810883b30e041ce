/**
 * fast-check arbitraries of hostile clusters: raw Services, EndpointSlices, Nodes and
 * ServiceCIDRs shaped like API objects, salted with everything the API server would refuse
 * (quotes, braces, newlines and unicode in names, 253-character and empty names, leading-zero,
 * out-of-range, mapped and zoned IPs, ports 0/70000/80.5/"80", unknown protocols and policies,
 * wrong types and missing fields anywhere), plus valid render configurations.
 *
 * Everything here is plain data; rendering and kernel checks live in `cluster.ts`.
 *
 * @module
 */
import fc from "fast-check";
import { type Config, DEFAULT_CONFIG, type DetectLocalMode } from "../../src/config/config.ts";
import { validateConfig } from "../../src/config/validation.ts";
import type { ObjectKind, RawObject } from "../../src/source/events.ts";

/** The node the proxy under test runs on. */
export const HOSTNAME = "node-a";

/** One raw object of a cluster, with the kind a source would deliver it as. */
export interface ClusterObject {
  readonly kind: ObjectKind;
  readonly object: RawObject;
}

/** The configuration knobs the properties vary (the rest is {@link DEFAULT_CONFIG}). */
export interface ConfigVariant {
  readonly masqueradeAll: boolean;
  readonly masqueradeBit: number;
  readonly clusterCIDRs: readonly string[];
  readonly detectLocalMode: DetectLocalMode;
  readonly bridgeInterface: string;
  readonly interfaceNamePrefix: string;
}

/** A generated cluster: a configuration and the objects a source lists, in order. */
export interface Cluster {
  readonly config: ConfigVariant;
  readonly objects: readonly ClusterObject[];
}

/** A {@link Config} for one render: the variant over the defaults, checked by validateConfig. */
export function configFor(variant: ConfigVariant, tableName: string): Config {
  return validateConfig({
    ...DEFAULT_CONFIG,
    ...variant,
    clusterCIDRs: [...variant.clusterCIDRs],
    hostname: HOSTNAME,
    tableName,
  });
}

// ---------------------------------------------------------------------------------------------
// Scalars

/** Characters that break scripts, logs or parsers when they leak, plus ordinary ones. */
const NAME_UNITS = [
  '"',
  "'",
  "{",
  "}",
  "\n",
  "\r",
  "\t",
  ";",
  "#",
  "\\",
  " ",
  "/",
  ":",
  "*",
  "$",
  "@",
  ",",
  "\u0000",
  "\u202e",
  "\u200b",
  "é",
  "日",
  "🙂",
  "-",
  ".",
  "_",
  "a",
  "b",
  "z",
  "0",
  "9",
];

/** A DNS-label-like name, as the API server would accept. */
export const dnsName: fc.Arbitrary<string> = fc.stringMatching(/^[a-z][a-z0-9-]{0,9}[a-z0-9]$/);

/** A string made of hostile characters (never empty). */
export const hostileString: fc.Arbitrary<string> = fc.string({
  unit: fc.constantFrom(...NAME_UNITS),
  minLength: 1,
  maxLength: 16,
});

/** A 253-character name (the API's longest), plain or hostile. */
const longName: fc.Arbitrary<string> = fc.oneof(
  fc.constantFrom("a", "x-", "日", '"', "{;}").map((s) => s.repeat(253).slice(0, 253)),
  fc.string({ unit: fc.constantFrom(...NAME_UNITS), minLength: 253, maxLength: 253 }),
);

/** A value of the wrong JSON type (what YAML could hand the proxy instead of a string). */
export const wrongType: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(null),
  fc.constant([]),
  fc.constant({}),
  fc.boolean(),
  fc.integer({ min: -5, max: 100_000 }),
  fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, -0, 1.5),
  fc.constant(["a"]),
  fc.constant([{ name: "x" }]),
  fc.constant({ name: "x", port: 80 }),
  fc.constant(new Date(0)),
);

/** A name: mostly usable, often hostile, sometimes long, empty or not a string at all. */
export const hostileName: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 8, arbitrary: dnsName },
  { weight: 8, arbitrary: hostileString },
  { weight: 2, arbitrary: longName },
  { weight: 1, arbitrary: fc.constant("") },
  { weight: 1, arbitrary: wrongType },
);

// ---------------------------------------------------------------------------------------------
// Fields: good values, and the bad ones a hostile object carries now and then

/** A field's acceptable values (edge cases included) and its unacceptable ones. */
interface Field {
  readonly good: fc.Arbitrary<unknown>;
  readonly bad: fc.Arbitrary<unknown>;
}

/** A field's arbitrary: good values only in a clean object, bad ones a quarter of the time else. */
function field(f: Field, hostile: boolean): fc.Arbitrary<unknown> {
  return hostile ? fc.oneof({ weight: 3, arbitrary: f.good }, f.bad) : f.good;
}

/** An IPv4 address `prefix.x.y` from a pool of `size` (so objects collide now and then). */
function pooledV4(prefix: string, size: number): fc.Arbitrary<string> {
  return fc.nat(size - 1).map((i) => `${prefix}.${i >> 8}.${i & 255}`);
}

/** An IPv6 address `prefix::x` from a pool of `size`. */
function pooledV6(prefix: string, size: number): fc.Arbitrary<string> {
  return fc.nat(size - 1).map((i) => `${prefix}::${i.toString(16)}`);
}

/** Cluster IPs: 10.96.0.0/22. */
const serviceIPv4 = pooledV4("10.96", 1024);
/** Cluster IPs: fd00:96::/118. */
const serviceIPv6 = pooledV6("fd00:96", 1024);

/** Pod IPs: 10.244.0.0/26 (small: endpoints overlap across slices). */
const podIPv4 = pooledV4("10.244", 64);
/** Pod IPs: fd00:244::/122. */
const podIPv6 = pooledV6("fd00:244", 64);

/** Addresses that parse but sit at the edges of their families. */
const EDGE_IPS = [
  "0.0.0.0",
  "255.255.255.255",
  "127.0.0.1",
  "224.0.0.1",
  "169.254.1.1",
  "::",
  "::1",
  "ff02::1",
  "fe80::1",
  "2001:db8::1",
  "FD00:96::A",
  "fd00:96:0:0:0:0:0:1",
  "::ffff:0:102:304",
  "64:ff9b::1.2.3.4",
];

/** Text that is not an acceptable IP address. */
const BAD_IPS = [
  "010.96.0.1",
  "10.96.0.300",
  "10.96.0.01",
  "::ffff:1.2.3.4",
  "::ffff:10.96.0.1",
  "fe80::1%eth0",
  "fe80::1%25eth0",
  "1.2.3",
  "1.2.3.4.5",
  " 10.96.0.1",
  "10.96.0.1 ",
  "10.96.0.1\n",
  "10.96.0.1/32",
  "0x0a.0.0.1",
  "10.96.0.1; flush ruleset",
  '10.96.0.1" }',
  "",
  "None",
  "localhost",
  "1::2::3",
  "fd00::g",
  "١٠.٠.٠.١",
  "fd00:96::1:2:3:4:5:6:7:8",
];

/** An IP field whose good values come from `pool` (or the family edges). */
function ipField(pool: fc.Arbitrary<string>): Field {
  return {
    good: fc.oneof({ weight: 15, arbitrary: pool }, fc.constantFrom(...EDGE_IPS)),
    bad: fc.oneof(
      { weight: 3, arbitrary: fc.constantFrom(...BAD_IPS) },
      hostileString,
      fc.constant(167772161),
      wrongType,
    ),
  };
}

/** A cluster IP of either family, IPv4 three times as often. */
const serviceIP = ipField(
  fc.oneof({ weight: 3, arbitrary: serviceIPv4 }, { weight: 1, arbitrary: serviceIPv6 }),
);

/** CIDRs as they appear in ServiceCIDRs, Node pod CIDRs and source ranges. */
const cidrField: Field = {
  good: fc.oneof(
    {
      weight: 4,
      arbitrary: fc.constantFrom(
        "10.96.0.0/16",
        "10.96.0.0/12",
        "10.96.0.0/22",
        "fd00:96::/108",
        "fd00:96::/64",
        "10.244.0.0/24",
        "fd00:244::/64",
      ),
    },
    fc.constantFrom(
      "0.0.0.0/0",
      "::/0",
      "10.96.0.1/16",
      " 10.96.0.0/16 ",
      "10.96.0.0/32",
      "fd00:96::1/128",
    ),
  ),
  bad: fc.oneof(
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        "10.96.0.0/33",
        "010.96.0.0/16",
        "::ffff:10.96.0.0/112",
        "fe80::/10%eth0",
        "10.96.0.0",
        "10.96.0.0/",
        "10.96.0.0/-1",
        "10.96.0.0/16/16",
        "fd00::/129",
        "10.96.0.0/016",
      ),
    },
    hostileString,
    wrongType,
  ),
};

/** A port number: any valid one (1 and 65535 often), or the classic mistakes. */
const portField: Field = {
  good: fc.oneof(
    { weight: 2, arbitrary: fc.constantFrom(80, 443, 53, 8080, 1, 65535) },
    fc.integer({ min: 1, max: 65535 }),
  ),
  bad: fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(0, 70000, -1, 80.5, "80", "http") },
    fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53, 1e3 + 0.1),
    wrongType,
  ),
};

/** A protocol. */
const protocolField: Field = {
  good: fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom("TCP", "UDP", "SCTP") },
    fc.constant(undefined),
  ),
  bad: fc.oneof(
    { weight: 2, arbitrary: fc.constantFrom("tcp", "ICMP", "", "TCP ", "sctp", "6") },
    hostileString,
    wrongType,
  ),
};

/** A string enum: its values or absent; bad: case errors, garbage and wrong types. */
function enumField(values: readonly string[]): Field {
  return {
    good: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...values) }, fc.constant(undefined)),
    bad: fc.oneof(
      {
        weight: 2,
        arbitrary: fc.constantFrom(...values.map((v) => v.toLowerCase()), "", ` ${values[0]}`),
      },
      hostileString,
      wrongType,
    ),
  };
}

// ---------------------------------------------------------------------------------------------
// Wrong types and missing fields anywhere

/** Marks "remove this field" in a corruption. */
const REMOVE = Symbol("remove");

/** One corruption: replace (or remove) the value at the `at`-th path of an object. */
interface Corruption {
  readonly at: number;
  readonly value: unknown;
}

const corruption: fc.Arbitrary<Corruption> = fc.record({
  at: fc.nat(),
  value: fc.oneof({ weight: 3, arbitrary: wrongType }, fc.constant(REMOVE), hostileString),
});

/** A few corruptions, or (usually) none. */
const corruptions: fc.Arbitrary<readonly Corruption[]> = fc.oneof(
  { weight: 5, arbitrary: fc.constant([]) },
  fc.array(corruption, { minLength: 1, maxLength: 3 }),
);

/**
 * Wraps an object arbitrary so that some objects get a few fields (at any depth, except the
 * kind and apiVersion a source already checked) replaced by values of the wrong type, or removed.
 */
export function corrupted(arb: fc.Arbitrary<RawObject>): fc.Arbitrary<RawObject> {
  return fc.tuple(arb, corruptions).map(([object, list]) => corrupt(object, list));
}

function corrupt(object: RawObject, corruptions: readonly Corruption[]): RawObject {
  if (corruptions.length === 0) return object;
  const copy = structuredClone(object);
  for (const { at, value } of corruptions) {
    const paths = fieldPaths(copy);
    if (paths.length === 0) break;
    const [parent, key] = paths[at % paths.length];
    if (value === REMOVE) {
      if (Array.isArray(parent)) parent.splice(Number(key), 1);
      else delete parent[key];
    } else if (Array.isArray(parent)) parent[Number(key)] = structuredClone(value);
    else parent[key] = structuredClone(value);
  }
  return copy;
}

type Container = Record<string, unknown> | unknown[];

function fieldPaths(root: RawObject): [Container, string][] {
  const out: [Container, string][] = [];
  const visit = (node: unknown) => {
    if (Array.isArray(node)) {
      node.forEach((child, i) => {
        out.push([node, String(i)]);
        visit(child);
      });
    } else if (typeof node === "object" && node !== null && !(node instanceof Date)) {
      const record = node as Record<string, unknown>;
      for (const [key, child] of Object.entries(record)) {
        if (node === root && (key === "kind" || key === "apiVersion")) continue;
        out.push([record, key]);
        visit(child);
      }
    }
  };
  visit(root);
  return out;
}

/** Sets `object[key]` unless `value` is undefined (so a field can be missing). */
function put(object: Record<string, unknown>, key: string, value: unknown): void {
  if (value !== undefined) object[key] = value;
}

// ---------------------------------------------------------------------------------------------
// Objects

/** Names shared by a cluster's objects, so slices find their services and ports. */
interface Pools {
  readonly namespaces: readonly unknown[];
  readonly services: readonly unknown[];
  readonly portNames: readonly unknown[];
}

/** The value type of an arbitrary. */
type ValueOf<A> = A extends fc.Arbitrary<infer T> ? T : never;

function pick<T>(pool: readonly T[], index: number): T {
  return pool[index % pool.length];
}

/** The name of the `i`-th Service port. */
function portName(p: { name: number }, i: number, pools: Pools): unknown {
  return pick(pools.portNames, p.name < 0 ? i : p.name);
}

function servicePortSpec(hostile: boolean) {
  return fc.record({
    /** Index into the port-name pool; -1 takes the port's own position (so names differ). */
    name: fc.oneof({ weight: 9, arbitrary: fc.constant(-1) }, fc.nat()),
    port: field(portField, hostile),
    protocol: field(protocolField, hostile),
    targetPort: fc.oneof(portField.good, portField.bad, fc.constant("http")),
    nodePort: fc.oneof(
      fc.constant(undefined),
      fc.integer({ min: 30000, max: 32767 }),
      field(portField, hostile),
    ),
  });
}

const clusterIPsField: Field = {
  good: fc.oneof(
    { weight: 20, arbitrary: fc.tuple(serviceIP.good) },
    { weight: 6, arbitrary: fc.tuple(serviceIPv4, serviceIPv6) },
    { weight: 2, arbitrary: fc.tuple(serviceIPv6, serviceIPv4) },
    fc.constantFrom(["None"], [], [""]),
    fc.constant(undefined),
  ),
  bad: fc.oneof(
    { weight: 3, arbitrary: fc.array(fc.oneof(serviceIP.good, serviceIP.bad), { maxLength: 3 }) },
    fc.tuple(serviceIPv4, serviceIPv4),
    fc.constantFrom(["None", "fd00:96::1"], "10.96.0.1"),
    serviceIP.bad,
  ),
};

function serviceSpec(hostile: boolean) {
  const ips = (max: number) =>
    fc.oneof(
      { weight: 3, arbitrary: fc.constant(undefined) },
      fc.array(field(serviceIP, hostile), { maxLength: max }),
    );
  return fc.record({
    namespace: fc.nat(),
    name: fc.nat(),
    type: field(
      enumField([
        "ClusterIP",
        "ClusterIP",
        "NodePort",
        "LoadBalancer",
        "LoadBalancer",
        "ExternalName",
      ]),
      hostile,
    ),
    clusterIPs: field(clusterIPsField, hostile),
    clusterIP: fc.oneof(
      { weight: 6, arbitrary: fc.constant("<first>") },
      fc.constant(undefined),
      fc.constant("None"),
      field(serviceIP, hostile),
    ),
    ports: hostile
      ? fc.oneof(
        { weight: 4, arbitrary: fc.array(servicePortSpec(hostile), { maxLength: 4 }) },
        wrongType,
      )
      : fc.array(servicePortSpec(hostile), { minLength: 1, maxLength: 4 }),
    sessionAffinity: field(enumField(["None", "ClientIP"]), hostile),
    timeoutSeconds: field({
      good: fc.constantFrom(undefined, 1, 10800, 86400),
      bad: fc.constantFrom(0, 86401, 1.5, "10", -1, null),
    }, hostile),
    externalTrafficPolicy: field(enumField(["Cluster", "Local"]), hostile),
    internalTrafficPolicy: field(enumField(["Cluster", "Local"]), hostile),
    externalIPs: ips(2),
    ingress: fc.oneof(
      { weight: 2, arbitrary: fc.constant(undefined) },
      fc.array(
        fc.record({
          ip: field(serviceIP, hostile),
          ipMode: field(enumField(["VIP", "Proxy"]), hostile),
        }, { requiredKeys: [] }),
        { maxLength: 2 },
      ),
    ),
    sourceRanges: fc.oneof(
      { weight: 2, arbitrary: fc.constant(undefined) },
      fc.array(field(cidrField, hostile), { maxLength: 3 }),
    ),
    healthCheckNodePort: fc.oneof(fc.constant(undefined), field(portField, hostile)),
    otherProxy: fc.oneof({ weight: 20, arbitrary: fc.constant(false) }, fc.constant(true)),
  });
}

/** The parts of a Service before names are resolved: clean three times as often as hostile. */
const serviceParts = fc.oneof({ weight: 3, arbitrary: serviceSpec(false) }, serviceSpec(true));

function buildService(s: ValueOf<typeof serviceParts>, pools: Pools): RawObject {
  const metadata: Record<string, unknown> = {
    namespace: pick(pools.namespaces, s.namespace),
    name: pick(pools.services, s.name),
    labels: s.otherProxy ? { "service.kubernetes.io/service-proxy-name": "other" } : {},
  };
  const spec: Record<string, unknown> = {};
  put(spec, "type", s.type);
  put(spec, "clusterIPs", s.clusterIPs);
  const first = Array.isArray(s.clusterIPs) ? s.clusterIPs[0] : undefined;
  put(spec, "clusterIP", s.clusterIP === "<first>" ? first : s.clusterIP);
  spec.ports = Array.isArray(s.ports)
    ? s.ports.map((p, i) => {
      const port: Record<string, unknown> = { name: portName(p, i, pools) };
      put(port, "port", p.port);
      put(port, "protocol", p.protocol);
      put(port, "targetPort", p.targetPort);
      put(port, "nodePort", p.nodePort);
      return port;
    })
    : s.ports;
  put(spec, "sessionAffinity", s.sessionAffinity);
  if (s.timeoutSeconds !== undefined) {
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: s.timeoutSeconds } };
  }
  put(spec, "externalTrafficPolicy", s.externalTrafficPolicy);
  put(spec, "internalTrafficPolicy", s.internalTrafficPolicy);
  put(spec, "externalIPs", s.externalIPs);
  put(spec, "loadBalancerSourceRanges", s.sourceRanges);
  put(spec, "healthCheckNodePort", s.healthCheckNodePort);
  const object: RawObject = { apiVersion: "v1", kind: "Service", metadata, spec };
  if (s.ingress !== undefined) object.status = { loadBalancer: { ingress: s.ingress } };
  return object;
}

/** A pod IP of the slice's family, resolved when the slice is built. */
class PodAddress {
  constructor(readonly index: number) {}

  /** The address in `family` (IPv6 for an IPv6 slice, else IPv4). */
  in(family: unknown): string {
    const i = this.index;
    return family === "IPv6" ? `fd00:244::${i.toString(16)}` : `10.244.${i >> 8}.${i & 255}`;
  }
}

/** An endpoint address: of the slice's family, or (in a hostile slice) anything. */
function podAddress(hostile: boolean): fc.Arbitrary<unknown> {
  const own = fc.nat(63).map((i) => new PodAddress(i));
  const pod = ipField(fc.oneof(podIPv4, podIPv6));
  return hostile ? fc.oneof({ weight: 4, arbitrary: own }, pod.good, pod.bad) : own;
}

function endpointSpec(hostile: boolean) {
  const condition = field(
    { good: fc.constantFrom(true, false, undefined), bad: wrongType },
    hostile,
  );
  return fc.record({
    addresses: hostile
      ? fc.oneof(
        { weight: 4, arbitrary: fc.tuple(podAddress(hostile)) },
        fc.array(podAddress(hostile), { maxLength: 3 }),
        wrongType,
      )
      : fc.tuple(podAddress(hostile)),
    ready: fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, condition),
    serving: condition,
    terminating: condition,
    nodeName: fc.oneof(
      { weight: 6, arbitrary: fc.constantFrom(HOSTNAME, "node-b", "node-c") },
      fc.constant(undefined),
      hostileName,
    ),
    zone: fc.oneof(fc.constant(undefined), fc.constantFrom("zone-a", "zone-b"), hostileName),
    hints: fc.oneof(
      { weight: 6, arbitrary: fc.constant(undefined) },
      fc.record({
        forZones: fc.array(fc.record({ name: fc.oneof(fc.constant("zone-a"), hostileName) }), {
          maxLength: 2,
        }),
        forNodes: fc.array(fc.record({ name: fc.oneof(fc.constant(HOSTNAME), hostileName) }), {
          maxLength: 2,
        }),
      }, { requiredKeys: [] }),
      wrongType,
    ),
  });
}

function sliceSpec(hostile: boolean) {
  return fc.record({
    namespace: fc.nat(),
    name: fc.oneof({ weight: 4, arbitrary: fc.nat(5) }, hostileName),
    service: fc.oneof(
      { weight: 12, arbitrary: fc.nat() },
      fc.constant(undefined),
      hostileName,
    ),
    addressType: field({
      good: fc.constantFrom("IPv4", "IPv4", "IPv4", "IPv6", "FQDN"),
      bad: fc.oneof(fc.constantFrom("ipv4", "", "IPv4 "), wrongType),
    }, hostile),
    ports: hostile
      ? fc.oneof(
        {
          weight: 4,
          arbitrary: fc.array(
            fc.record({
              name: fc.nat(),
              port: fc.oneof(field(portField, true), fc.constant(null)),
              protocol: field(protocolField, true),
            }),
            { maxLength: 4 },
          ),
        },
        wrongType,
      )
      : fc.array(
        fc.record({ name: fc.nat(), port: portField.good, protocol: protocolField.good }),
        { minLength: 1, maxLength: 4 },
      ),
    endpoints: hostile
      ? fc.oneof(
        { weight: 4, arbitrary: fc.array(endpointSpec(true), { maxLength: 8 }) },
        wrongType,
      )
      : fc.array(endpointSpec(false), { maxLength: 8 }),
    headless: fc.oneof({ weight: 20, arbitrary: fc.constant(false) }, fc.constant(true)),
    /** Index of the Service whose identity and ports the slice copies; -1 for none. */
    mirror: fc.oneof({ weight: 4, arbitrary: fc.nat() }, fc.constant(-1)),
  });
}

/** The parts of an EndpointSlice before names are resolved. */
const sliceParts = fc.oneof({ weight: 3, arbitrary: sliceSpec(false) }, sliceSpec(true));

/**
 * Builds a slice; with `mirror` (a Service of the same cluster) it belongs to that Service and
 * carries its port names and protocols, so that endpoints really reach service ports.
 */
function buildSlice(
  s: ValueOf<typeof sliceParts>,
  pools: Pools,
  mirror?: ValueOf<typeof serviceParts>,
): RawObject {
  const serviceName = mirror
    ? pick(pools.services, mirror.name)
    : typeof s.service === "number"
    ? pick(pools.services, s.service)
    : s.service;
  const labels: Record<string, unknown> = {};
  put(labels, "kubernetes.io/service-name", serviceName);
  if (s.headless) labels["service.kubernetes.io/headless"] = "";
  const name = typeof s.name === "number" ? `${String(serviceName)}-${s.name}` : s.name;
  const endpoints = Array.isArray(s.endpoints)
    ? s.endpoints.map((e) => {
      const addresses = Array.isArray(e.addresses)
        ? (e.addresses as unknown[]).map((a) => a instanceof PodAddress ? a.in(s.addressType) : a)
        : e.addresses;
      const endpoint: Record<string, unknown> = { addresses };
      const conditions: Record<string, unknown> = {};
      put(conditions, "ready", e.ready);
      put(conditions, "serving", e.serving);
      put(conditions, "terminating", e.terminating);
      endpoint.conditions = conditions;
      put(endpoint, "nodeName", e.nodeName);
      put(endpoint, "zone", e.zone);
      put(endpoint, "hints", e.hints);
      return endpoint;
    })
    : s.endpoints;
  const ownPorts = Array.isArray(s.ports) && s.ports.length > 0 ? s.ports : undefined;
  const ports = mirror && Array.isArray(mirror.ports)
    ? mirror.ports.map((p, i) => {
      const port: Record<string, unknown> = { name: portName(p, i, pools) };
      put(port, "port", ownPorts ? ownPorts[i % ownPorts.length].port : 8080 + i);
      put(port, "protocol", p.protocol);
      return port;
    })
    : Array.isArray(s.ports)
    ? s.ports.map((p) => {
      const port: Record<string, unknown> = { name: pick(pools.portNames, p.name) };
      put(port, "port", p.port);
      put(port, "protocol", p.protocol);
      return port;
    })
    : s.ports;
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      namespace: pick(pools.namespaces, mirror ? mirror.namespace : s.namespace),
      name,
      labels,
    },
    addressType: s.addressType,
    ports,
    endpoints,
  } satisfies RawObject;
}

const nodeIP = ipField(fc.constantFrom("192.168.0.10", "fd00:192::10", "10.0.0.5"));

const nodeSpec = fc.record({
  name: fc.oneof(
    { weight: 4, arbitrary: fc.constant(HOSTNAME) },
    fc.constant("node-b"),
    hostileName,
  ),
  addresses: fc.array(
    fc.record({
      type: fc.oneof(
        { weight: 4, arbitrary: fc.constantFrom("InternalIP", "ExternalIP", "Hostname") },
        wrongType,
      ),
      address: fc.oneof({ weight: 3, arbitrary: nodeIP.good }, nodeIP.bad),
    }),
    { maxLength: 3 },
  ),
  podCIDRs: fc.oneof(
    fc.constant(undefined),
    fc.array(fc.oneof({ weight: 3, arbitrary: cidrField.good }, cidrField.bad), { maxLength: 2 }),
    fc.constant(["10.244.0.0/24", "fd00:244::/64"]),
  ),
  podCIDR: fc.oneof(
    { weight: 3, arbitrary: fc.constant(undefined) },
    cidrField.good,
    cidrField.bad,
  ),
  zone: fc.oneof(fc.constant(undefined), fc.constantFrom("zone-a"), hostileName),
});

/** A v1 Node, usually this proxy's own. */
export const nodeObject: fc.Arbitrary<RawObject> = corrupted(nodeSpec.map((n) => {
  const spec: Record<string, unknown> = {};
  put(spec, "podCIDRs", n.podCIDRs);
  put(spec, "podCIDR", n.podCIDR);
  const labels: Record<string, unknown> = {};
  put(labels, "topology.kubernetes.io/zone", n.zone);
  return {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: n.name, labels },
    spec,
    status: { addresses: n.addresses },
  };
}));

/** A networking.k8s.io/v1 ServiceCIDR. */
export const serviceCIDRObject: fc.Arbitrary<RawObject> = corrupted(
  fc.record({
    name: fc.oneof({ weight: 3, arbitrary: fc.constantFrom("kubernetes", "extra") }, hostileName),
    cidrs: fc.oneof(
      {
        weight: 8,
        arbitrary: fc.array(fc.oneof({ weight: 3, arbitrary: cidrField.good }, cidrField.bad), {
          maxLength: 3,
        }),
      },
      wrongType,
    ),
  }).map(({ name, cidrs }) => ({
    apiVersion: "networking.k8s.io/v1",
    kind: "ServiceCIDR",
    metadata: { name },
    spec: { cidrs },
  })),
);

/**
 * A Service with 500 to 900 endpoints spread over one to three slices that overlap by half,
 * some not ready, so that deduplication and big `add element` commands are exercised.
 */
export const bigService: fc.Arbitrary<ClusterObject[]> = fc.record({
  count: fc.integer({ min: 500, max: 900 }),
  slices: fc.integer({ min: 1, max: 3 }),
  ipv6: fc.boolean(),
  notReadyEvery: fc.integer({ min: 0, max: 7 }),
}).map(({ count, slices, ipv6, notReadyEvery }) => {
  const ip = (i: number) => ipv6 ? `fd00:248::${i.toString(16)}` : `10.248.${i >> 8}.${i & 255}`;
  const objects: ClusterObject[] = [{
    kind: "Service",
    object: {
      apiVersion: "v1",
      kind: "Service",
      metadata: { namespace: "big", name: "big" },
      spec: {
        type: "ClusterIP",
        clusterIP: ipv6 ? "fd00:96:250::1" : "10.96.250.1",
        clusterIPs: [ipv6 ? "fd00:96:250::1" : "10.96.250.1"],
        ports: [{ name: "http", port: 80, protocol: "TCP", targetPort: 8080 }],
      },
    },
  }];
  for (let s = 0; s < slices; s++) {
    const start = s * Math.floor(count / 2);
    objects.push({
      kind: "EndpointSlice",
      object: {
        apiVersion: "discovery.k8s.io/v1",
        kind: "EndpointSlice",
        metadata: {
          namespace: "big",
          name: `big-${s}`,
          labels: { "kubernetes.io/service-name": "big" },
        },
        addressType: ipv6 ? "IPv6" : "IPv4",
        ports: [{ name: "http", port: 8080, protocol: "TCP" }],
        endpoints: Array.from({ length: count }, (_, i) => ({
          addresses: [ip(start + i)],
          conditions: { ready: notReadyEvery === 0 || (start + i) % (notReadyEvery + 1) !== 0 },
          nodeName: i % 3 === 0 ? HOSTNAME : "node-b",
        })),
      },
    });
  }
  return objects;
});

/** Name pools of one cluster: a few good names first, then hostile ones. */

/** Name pools of one cluster: a few good names first, then hostile ones. */
const pools: fc.Arbitrary<Pools> = fc.record({
  namespaces: fc.array(hostileName, { maxLength: 2 }).map((extra) => ["default", ...extra]),
  services: fc.array(hostileName, { maxLength: 4 }).map((extra) => ["web", "db", ...extra]),
  portNames: fc.array(hostileName, { maxLength: 3 }).map((extra) => ["http", "", "dns", ...extra]),
});

/** The parts of a cluster before names are resolved (shrinks field by field). */
const clusterParts = fc.record({
  pools,
  services: fc.array(serviceParts, { maxLength: 8 }),
  slices: fc.array(sliceParts, { maxLength: 10 }),
  nodes: fc.array(nodeObject, { maxLength: 2 }),
  serviceCIDRs: fc.array(serviceCIDRObject, { maxLength: 2 }),
  corruptions: fc.array(corruptions, { maxLength: 18 }),
  big: fc.oneof({ weight: 24, arbitrary: fc.constant(undefined) }, bigService),
});

/** The objects of a cluster, in the order a source would list them. */
export const clusterObjects: fc.Arbitrary<ClusterObject[]> = clusterParts.map((parts) => {
  const objects: ClusterObject[] = [
    ...parts.nodes.map((object) => ({ kind: "Node" as const, object })),
    ...parts.serviceCIDRs.map((object) => ({ kind: "ServiceCIDR" as const, object })),
    ...parts.services.map((s) => ({
      kind: "Service" as const,
      object: buildService(s, parts.pools),
    })),
    ...parts.slices.map((s) => ({
      kind: "EndpointSlice" as const,
      object: buildSlice(
        s,
        parts.pools,
        s.mirror >= 0 ? parts.services[s.mirror % parts.services.length] : undefined,
      ),
    })),
  ];
  // Wrong types and missing fields anywhere: corrupt some of the objects.
  parts.corruptions.forEach((list, i) => {
    const target = objects[i];
    if (target && list.length > 0) objects[i] = { ...target, object: corrupt(target.object, list) };
  });
  return [...objects, ...(parts.big ?? [])];
});

/** One object of any kind, named from a fresh set of pools (so it often replaces another). */
export const clusterObject: fc.Arbitrary<ClusterObject> = fc.oneof(
  {
    weight: 4,
    arbitrary: corrupted(fc.tuple(pools, serviceParts).map(([p, s]) => buildService(s, p)))
      .map((object) => ({ kind: "Service" as const, object })),
  },
  {
    weight: 4,
    arbitrary: corrupted(fc.tuple(pools, sliceParts).map(([p, s]) => buildSlice(s, p)))
      .map((object) => ({ kind: "EndpointSlice" as const, object })),
  },
  nodeObject.map((object) => ({ kind: "Node" as const, object })),
  serviceCIDRObject.map((object) => ({ kind: "ServiceCIDR" as const, object })),
);

/** Every valid configuration variant the properties exercise. */
export const configVariant: fc.Arbitrary<ConfigVariant> = fc.record({
  masqueradeAll: fc.boolean(),
  masqueradeBit: fc.integer({ min: 0, max: 31 }),
  clusterCIDRs: fc.constantFrom(
    [],
    ["10.244.0.0/16"],
    ["fd00:244::/56"],
    ["10.244.0.0/16", "fd00:244::/56"],
    ["fd00:244::/56", "10.244.0.0/16"],
    ["10.0.0.0/8"],
    ["0.0.0.0/0", "::/0"],
    ["10.244.0.1/16"],
    ["010.244.0.0/16"],
    ["::ffff:10.244.0.0/112"],
  ),
  detectLocalMode: fc.constantFrom<DetectLocalMode>(
    "ClusterCIDR",
    "NodeCIDR",
    "BridgeInterface",
    "InterfaceNamePrefix",
    "None",
  ),
  bridgeInterface: fc.constantFrom("cbr0", "br-int", "docker0"),
  interfaceNamePrefix: fc.constantFrom("veth", "cali", "eth"),
});

/** A whole cluster: configuration and objects. */
export const cluster: fc.Arbitrary<Cluster> = fc.record({
  config: configVariant,
  objects: clusterObjects,
});
