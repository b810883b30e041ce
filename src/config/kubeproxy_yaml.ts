/**
 * Reading kube-proxy's configuration YAML the way upstream's decoder does: the YAML text (or a
 * kubeadm ConfigMap holding it) into a document, and typed access to its fields — YAML 1.1
 * booleans, Go durations, nil pointers — with every error naming the field by its path. Like
 * upstream's v1alpha1 decoding, strictness is forgiven: unknown and duplicate fields are noted in
 * a {@link StrictnessIssues} (the caller logs them once) and the file still loads, while a wrong
 * type or a bad value is an error. What the fields mean for {@link Config} is
 * kubeproxy_config.ts's business.
 *
 * @module
 */
import { YAMLException } from "js-yaml";
import { loadYamlDocuments } from "../bounded_yaml.ts";
import { ConfigError, invalidValue } from "./config_error.ts";
import { parseGoDuration } from "./duration.ts";

/** The only `apiVersion` kube-proxy's configuration file has. */
export const KUBE_PROXY_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1";

/** The ConfigMap key kubeadm stores the configuration under (`kube-system/kube-proxy`). */
export const KUBEADM_CONFIG_KEY = "config.conf";

/** A YAML mapping as parsed. */
export type Mapping = Record<string, unknown>;

/** Every field of v1alpha1 `KubeProxyConfiguration`, used or not (strict decoding). */
export const TOP_LEVEL_FIELDS: ReadonlySet<string> = new Set([
  "apiVersion",
  "kind",
  "featureGates",
  "clientConnection",
  "logging",
  "hostnameOverride",
  "bindAddress",
  "healthzBindAddress",
  "metricsBindAddress",
  "bindAddressHardFail",
  "enableProfiling",
  "showHiddenMetricsForVersion",
  "mode",
  "iptables",
  "ipvs",
  "nftables",
  "winkernel",
  "detectLocalMode",
  "detectLocal",
  "clusterCIDR",
  "nodePortAddresses",
  "oomScoreAdj",
  "conntrack",
  "configSyncPeriod",
  "portRange",
  "windowsRunAsService",
]);

/** Fields of each section this proxy reads; sections it ignores are only checked to be maps. */
export const SECTION_FIELDS: Readonly<Record<string, ReadonlySet<string>>> = {
  iptables: new Set([
    "masqueradeBit",
    "masqueradeAll",
    "localhostNodePorts",
    "snatNodeInternalIP",
    "syncPeriod",
    "minSyncPeriod",
  ]),
  nftables: new Set(["masqueradeBit", "masqueradeAll", "syncPeriod", "minSyncPeriod"]),
  detectLocal: new Set(["bridgeInterface", "interfaceNamePrefix"]),
  clientConnection: new Set(["kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"]),
  logging: new Set(["format", "flushFrequency", "verbosity", "vmodule", "options"]),
  conntrack: new Set([
    "maxPerCore",
    "min",
    "tcpEstablishedTimeout",
    "tcpCloseWaitTimeout",
    "tcpBeLiberal",
    "udpTimeout",
    "udpStreamTimeout",
  ]),
};

/**
 * What strict decoding would refuse and lenient decoding lets through, in the order found:
 * `unknown field "udpIdleTimeout"`, `duplicate field "mode" (line 4)`. Upstream decodes strictly,
 * and when only such issues fail it, decodes again leniently and logs them in one line.
 */
export type StrictnessIssues = string[];

/** Ignored upstream fields that hold a map; anything but a map (or null) is a type error. */
export const IGNORED_MAPPING_FIELDS = ["featureGates", "winkernel"] as const;

/** YAML 1.1 booleans, which Go's YAML reader (and so kube-proxy) accepts. */
const YAML11_BOOLEANS: ReadonlyMap<string, boolean> = new Map(
  [
    ...["y", "Y", "yes", "Yes", "YES", "on", "On", "ON"].map((word) => [word, true] as const),
    ...["n", "N", "no", "No", "NO", "off", "Off", "OFF"].map((word) => [word, false] as const),
  ],
);

const DURATION_RULE = "must be a duration such as 30s, 1m0s or 500ms";

/**
 * Parses one YAML document; an empty or comment-only text reads as null. Nesting and aliases
 * are bounded (`../bounded_yaml.ts`), so no text costs more than its size. A key repeated in a
 * mapping is noted in `issues` (the last value wins, as in Go's lenient reader); without
 * `issues` it is an error.
 */
export function loadYaml(text: string, where: string, issues?: StrictnessIssues): unknown {
  // js-yaml refuses an empty stream; kube-proxy reads it as an empty object (then no kind).
  if (text.split("\n").every((line) => /^\s*(#.*)?$/.test(line))) return null;
  let documents: unknown[];
  try {
    try {
      documents = loadYamlDocuments(text);
    } catch (error) {
      const duplicate = issues === undefined ? undefined : duplicateKey(error, text);
      if (duplicate === undefined) throw error;
      issues?.push(duplicate);
      documents = loadYamlDocuments(text, { duplicateKeys: "last-wins" });
    }
  } catch (error) {
    const detail = error instanceof Error ? error.message.split("\n")[0] : String(error);
    throw new ConfigError(`${where}: not valid YAML: ${detail}`, { cause: error });
  }
  if (documents.length !== 1) {
    // js-yaml's own words for what its load() refuses.
    const detail = documents.length === 0
      ? "expected a document, but the input is empty"
      : "expected a single document in the stream, but found more";
    throw new ConfigError(`${where}: not valid YAML: ${detail}`);
  }
  return documents[0];
}

/** `duplicate field "key" (line N)` when `error` is js-yaml's refusal of a repeated key. */
function duplicateKey(error: unknown, text: string): string | undefined {
  if (!(error instanceof YAMLException) || error.reason !== "duplicated mapping key") {
    return undefined;
  }
  const position = error.mark?.position ?? 0;
  const key = /^\s*["']?([^"':\n]*)/.exec(text.slice(position))?.[1] ?? "";
  return `duplicate field ${JSON.stringify(key)} (line ${(error.mark?.line ?? 0) + 1})`;
}

/** A YAML mapping (an object, not a list). */
export function isMapping(value: unknown): value is Mapping {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The `KubeProxyConfiguration` text inside a ConfigMap, as kubeadm lays it out. */
export function configMapPayload(
  configMap: Mapping,
  where: string,
): { text: string; where: string } {
  const data = configMap.data;
  if (!isMapping(data)) {
    throw new ConfigError(
      `${where}: ConfigMap has no data; ` +
        `expected data["${KUBEADM_CONFIG_KEY}"] holding a KubeProxyConfiguration`,
      { field: `${where}: data` },
    );
  }
  const keys = Object.keys(data);
  const key = KUBEADM_CONFIG_KEY in data ? KUBEADM_CONFIG_KEY : keys.length === 1 ? keys[0] : "";
  if (key === "") {
    throw new ConfigError(
      `${where}: ConfigMap has no data["${KUBEADM_CONFIG_KEY}"] (keys: ${keys.join(", ")}); ` +
        "expected the KubeProxyConfiguration under that key, as kubeadm writes it",
      { field: `${where}: data` },
    );
  }
  const text = data[key];
  if (typeof text !== "string") {
    throw invalidValue(`${where}: data["${key}"]`, text, { rule: "must be a string" });
  }
  return { text, where: `${where} (ConfigMap key ${key})` };
}

/**
 * Typed access to one mapping of the document, naming fields by their path in errors; unknown
 * fields are noted in the {@link StrictnessIssues} shared by every section of the document.
 */
export class Fields {
  constructor(
    private readonly mapping: Mapping,
    private readonly where: string,
    private readonly prefix: string,
    /** Where unknown fields are noted; shared with the sections. */
    readonly issues: StrictnessIssues = [],
  ) {}

  /** `where: path.to.key`, the name of a field in messages. */
  name(key: string): string {
    return `${this.where}: ${this.prefix}${key}`;
  }

  /**
   * Notes keys outside `allowed` in {@link issues} (upstream's strict decoding refuses them, its
   * lenient decoding skips them), and forgets them.
   */
  noteUnknown(allowed: ReadonlySet<string>): void {
    for (const key of Object.keys(this.mapping)) {
      if (!allowed.has(key)) this.issues.push(`unknown field "${this.prefix}${key}"`);
    }
  }

  /** Whether the field is present with a value other than null. */
  has(key: string): boolean {
    return this.mapping[key] !== undefined && this.mapping[key] !== null;
  }

  /** The raw value of a field, for fields only reported, never read. */
  raw(key: string): unknown {
    return this.mapping[key];
  }

  fail(key: string, rule: string, cause?: unknown): never {
    throw invalidValue(this.name(key), this.mapping[key], { rule, cause });
  }

  /** A nested mapping; absent or null reads as empty. */
  section(key: string): Fields {
    const value = this.mapping[key];
    if (value === undefined || value === null) {
      return new Fields({}, this.where, `${this.prefix}${key}.`, this.issues);
    }
    if (!isMapping(value)) this.fail(key, "must be a mapping");
    return new Fields(value, this.where, `${this.prefix}${key}.`, this.issues);
  }

  /** A string; absent or null reads as "". */
  string(key: string): string {
    const value = this.mapping[key];
    if (value === undefined || value === null) return "";
    if (typeof value !== "string") this.fail(key, "must be a string");
    return value;
  }

  /** A boolean (YAML 1.1 words included); absent or null reads as false. */
  boolean(key: string): boolean {
    const value = this.mapping[key];
    if (value === undefined || value === null) return false;
    if (typeof value === "boolean") return value;
    const word = typeof value === "string" ? YAML11_BOOLEANS.get(value) : undefined;
    if (word === undefined) this.fail(key, "must be true or false");
    return word;
  }

  /** The keys present, in the file's order. */
  keys(): string[] {
    return Object.keys(this.mapping);
  }

  /** A number, whole or not (Go's float32 `qps`); absent or null reads as 0. */
  number(key: string): number {
    const value = this.mapping[key];
    if (value === undefined || value === null) return 0;
    if (typeof value !== "number" || !Number.isFinite(value)) this.fail(key, "must be a number");
    return value;
  }

  /**
   * A duration written as a Go duration string or as a whole number of nanoseconds (component
   * base's `logging.flushFrequency`), in ms.
   */
  durationOrNanoseconds(key: string): number {
    const value = this.mapping[key];
    if (typeof value === "number" && Number.isSafeInteger(value)) return value / 1e6;
    return this.duration(key);
  }

  /** A whole number; absent or null reads as undefined (a nil pointer upstream). */
  integer(key: string): number | undefined {
    const value = this.mapping[key];
    if (value === undefined || value === null) return undefined;
    if (typeof value !== "number" || !Number.isSafeInteger(value)) {
      this.fail(key, "must be a whole number");
    }
    return value;
  }

  /** A list of strings; absent or null reads as []. */
  strings(key: string): string[] {
    const value = this.mapping[key];
    if (value === undefined || value === null) return [];
    if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) {
      this.fail(key, "must be a list of strings");
    }
    return value;
  }

  /** A Go duration string in ms for a pointer field: absent or null reads as undefined. */
  optionalDuration(key: string): number | undefined {
    const value = this.mapping[key];
    return value === undefined || value === null ? undefined : this.duration(key);
  }

  /** A Go duration string in ms; absent reads as 0, null fails as it does upstream. */
  duration(key: string): number {
    const value = this.mapping[key];
    if (value === undefined) return 0;
    if (typeof value !== "string" && value !== null) this.fail(key, `${DURATION_RULE} (quoted)`);
    try {
      return parseGoDuration(value ?? "");
    } catch (error) {
      this.fail(key, `${DURATION_RULE} (${(error as Error).message})`, error);
    }
  }
}
