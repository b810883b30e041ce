/**
 * The rules a configuration value must follow, shared by the flag parser, the
 * `KubeProxyConfiguration` parser and {@link validateConfig} (the last check on the merged
 * {@link Config}).
 *
 * Addresses are checked the way kube-proxy checks them (Go's sloppy parsers, see
 * address_syntax.ts). Each `check…` function returns `undefined` for a good value or the
 * rule it breaks (`"must be 0-31"`), so callers can name the value the way the user wrote it.
 *
 * @module
 */

import type { Config, DetectLocalMode, ProxyMode } from "./config.ts";
import { invalidValue } from "./config_error.ts";
import { formatGoDuration } from "./duration.ts";
import { cidrFamily, ipFamily, splitHostPort } from "./address_syntax.ts";

/** The `nodePortAddresses` keyword for "the node's primary IPs". */
export const NODE_PORT_ADDRESSES_PRIMARY = "primary";

/** The detect-local modes kube-proxy accepts in flags and files (`None` is internal only). */
export const UPSTREAM_DETECT_LOCAL_MODES: readonly DetectLocalMode[] = [
  "ClusterCIDR",
  "NodeCIDR",
  "BridgeInterface",
  "InterfaceNamePrefix",
];

const detectLocalModeList = UPSTREAM_DETECT_LOCAL_MODES.join(", ");

/** Default ports of the health and metrics servers, appended when an address has none. */
export const DEFAULT_PORTS = { healthz: 10256, metrics: 10249 } as const;

/**
 * Checks a masquerade bit: an integer 0-31.
 *
 * @example
 * ```ts
 * checkMasqueradeBit(40); // "must be 0-31"
 * ```
 */
export function checkMasqueradeBit(bit: number): string | undefined {
  return Number.isInteger(bit) && bit >= 0 && bit <= 31 ? undefined : "must be 0-31";
}

/**
 * Checks the pod CIDRs of `clusterCIDR`: each a CIDR, at most one per IP family (so at most a
 * dual-stack pair). An empty list is fine (no cluster CIDR).
 *
 * @example
 * ```ts
 * checkClusterCIDRs(["10.244.0.0/16", "fd00:10:244::/56"]); // undefined
 * checkClusterCIDRs(["10.0.0.0/8", "192.168.0.0/16"]); // "must be ... (at most one per IP family)"
 * ```
 */
export function checkClusterCIDRs(cidrs: readonly string[]): string | undefined {
  const rule = "must be a CIDR or a comma-separated IPv4,IPv6 pair of CIDRs";
  const bad = cidrs.find((cidr) => cidrFamily(cidr) === undefined);
  if (bad !== undefined) return `${rule} (${JSON.stringify(bad)} is not a CIDR)`;
  const families = cidrs.map(cidrFamily);
  if (cidrs.length > 2 || new Set(families).size !== families.length) {
    return `${rule} (at most one per IP family)`;
  }
  return undefined;
}

/**
 * Checks an interface name (or prefix) that goes into rules as `iifname "…"`: empty (unused),
 * or what Linux allows — at most 15 characters, no `/`, whitespace, quotes or `*`.
 *
 * @example
 * ```ts
 * checkInterfaceName("cbr0"); // undefined
 * checkInterfaceName('cbr0"; flush ruleset'); // "must be an interface name ..."
 * ```
 */
export function checkInterfaceName(name: string): string | undefined {
  if (name === "" || /^[A-Za-z0-9_.:@+-]{1,15}$/.test(name) && name !== "." && name !== "..") {
    return undefined;
  }
  return "must be an interface name (1-15 characters: letters, digits, _ . : @ + -)";
}

/**
 * Checks `nodePortAddresses`: a list of CIDRs, or the single keyword `primary`. Returns the
 * index of the first bad entry and the rule it breaks.
 *
 * @example
 * ```ts
 * checkNodePortAddresses(["primary", "10.0.0.0/8"]);
 * // { index: 0, rule: "must be the only entry (\"primary\" cannot be combined with CIDRs)" }
 * ```
 */
export function checkNodePortAddresses(
  entries: readonly string[],
): { index: number; rule: string } | undefined {
  for (const [index, entry] of entries.entries()) {
    if (entry === NODE_PORT_ADDRESSES_PRIMARY) {
      if (entries.length === 1) return undefined;
      return {
        index,
        rule: `must be the only entry ("primary" cannot be combined with CIDRs)`,
      };
    }
    if (cidrFamily(entry) === undefined) return { index, rule: `must be a CIDR or "primary"` };
  }
  return undefined;
}

/**
 * Checks a server address given as `IP:port` (`[IP]:port` for IPv6), port 1-65535; the empty
 * string (server disabled) passes.
 *
 * @example
 * ```ts
 * checkHostPort("0.0.0.0:10256"); // undefined
 * checkHostPort("localhost:10256"); // "must be IP:port with a port 1-65535, e.g. 0.0.0.0:10256"
 * ```
 */
export function checkHostPort(address: string): string | undefined {
  if (address === "") return undefined;
  const parts = splitHostPort(address);
  const good = parts !== undefined && ipFamily(parts.host) !== undefined &&
    /^\d{1,5}$/.test(parts.port) && Number(parts.port) >= 1 && Number(parts.port) <= 65535;
  return good ? undefined : "must be IP:port with a port 1-65535, e.g. 0.0.0.0:10256";
}

/** Checks `bindAddress`: empty (take node IPs from the Node) or an IP address. */
export function checkBindAddress(address: string): string | undefined {
  return address === "" || ipFamily(address) !== undefined ? undefined : "must be an IP address";
}

/**
 * Checks an nft table name: a letter, then letters, digits, `_`, `-` or `.`, at most 255
 * characters (nft's identifier syntax, minus the characters that need quoting in scripts).
 */
export function checkTableName(name: string): string | undefined {
  return /^[A-Za-z][A-Za-z0-9_.-]{0,254}$/.test(name)
    ? undefined
    : "must start with a letter and hold only letters, digits, _, - and . (at most 255)";
}

/** Checks a log verbosity: a whole number from 0 up. */
export function checkVerbosity(level: number): string | undefined {
  return Number.isSafeInteger(level) && level >= 0 ? undefined : "must be a whole number >= 0";
}

/** Checks a log format (`logging.format`, `--logging-format`): `text` or `json`, as klog's. */
export function checkLoggingFormat(format: string): string | undefined {
  return format === "text" || format === "json" ? undefined : 'must be "text" or "json"';
}

/** Checks an `oom_score_adj` (`oomScoreAdj`, `--oom-score-adj`): a whole number -1000..1000. */
export function checkOomScoreAdj(value: number): string | undefined {
  return Number.isSafeInteger(value) && value >= -1000 && value <= 1000
    ? undefined
    : "must be in the range [-1000, 1000]";
}

/** Checks an API client's `qps`: any finite number (0 or below: no limit). */
export function checkQps(qps: number): string | undefined {
  return Number.isFinite(qps) ? undefined : "must be a number";
}

/** Checks an API client's `burst`: a whole number from 0 up (0: the default). */
export function checkBurst(burst: number): string | undefined {
  return Number.isSafeInteger(burst) && burst >= 0 ? undefined : "must be a whole number >= 0";
}

/** Checks a size limit in bytes: a whole number above 0 (at most 2^53). */
export function checkByteLimit(bytes: number): string | undefined {
  return Number.isSafeInteger(bytes) && bytes > 0 ? undefined : "must be a whole number above 0";
}

/** Checks a `syncPeriod`: longer than zero. */
export function checkSyncPeriod(ms: number): string | undefined {
  return ms > 0 ? undefined : "must be greater than 0";
}

/** Checks a `minSyncPeriod`: zero or longer. */
export function checkMinSyncPeriod(ms: number): string | undefined {
  return ms >= 0 ? undefined : "must be greater than or equal to 0";
}

/**
 * Trims and lowercases a node name, as kube-proxy's `GetHostname` does with both
 * `--hostname-override` and the machine's host name.
 *
 * @example
 * ```ts
 * normalizeHostname(" Node-1\n"); // "node-1"
 * ```
 */
export function normalizeHostname(name: string): string {
  return name.trim().toLowerCase();
}

/**
 * Reads an upstream proxy mode name (`mode:` in the file, `--proxy-mode`): `nftables` → `nft`,
 * `iptables` → `iptables`, `ipvs` → `nft` (ipvs_mode.ts says what of ipvs mode carries over),
 * empty → `undefined` (the default). Throws {@link ConfigError} naming `field` for anything
 * else; `kernelspace` gets its own explanation.
 *
 * @example
 * ```ts
 * parseUpstreamProxyMode("nftables", "flag --proxy-mode"); // "nft"
 * parseUpstreamProxyMode("", "config kube-proxy.yaml: mode"); // undefined
 * ```
 */
export function parseUpstreamProxyMode(name: string, field: string): ProxyMode | undefined {
  const rule = `must be "nftables", "iptables", "ipvs" or "" (the default, nftables)`;
  switch (name) {
    case "nftables":
    case "ipvs":
      return "nft";
    case "iptables":
      return "iptables";
    case "":
      return undefined;
    case "kernelspace":
      throw invalidValue(field, name, { rule: `${rule}: kube-nftproxy has no ${name} mode` });
    default:
      throw invalidValue(field, name, { rule });
  }
}

/**
 * Reads an upstream detect-local mode (`detectLocalMode:`, `--detect-local-mode`); empty →
 * `undefined` (the default, ClusterCIDR). Throws {@link ConfigError} naming `field` for values
 * kube-proxy refuses (including `None`, which only this proxy's internals use).
 *
 * @example
 * ```ts
 * parseUpstreamDetectLocalMode("NodeCIDR", "flag --detect-local-mode"); // "NodeCIDR"
 * ```
 */
export function parseUpstreamDetectLocalMode(
  name: string,
  field: string,
): DetectLocalMode | undefined {
  if (name === "") return undefined;
  const mode = UPSTREAM_DETECT_LOCAL_MODES.find((candidate) => candidate === name);
  if (mode === undefined) {
    throw invalidValue(field, name, { rule: `must be one of ${detectLocalModeList} or ""` });
  }
  return mode;
}

/** Options of {@link validateConfig}. */
export interface ValidateConfigOptions {
  /**
   * Names a field in messages, e.g. `flag --iptables-masquerade-bit` or
   * `config kube-proxy.yaml: nftables.syncPeriod`, so errors point at what the user wrote.
   * Default: {@link describeField} (the upstream file and flag names).
   */
  describe?: (key: keyof Config) => string;
}

/** Why a conntrack table size (`conntrack.maxPerCore`, `conntrack.min`) is invalid, if it is. */
export function checkConntrackCount(value: number): string | undefined {
  return Number.isSafeInteger(value) && value >= 0 && value <= 2 ** 31 - 1
    ? undefined
    : "must be a whole number from 0 to 2147483647";
}

/** Why a conntrack timeout is invalid, if it is: whole seconds, not negative (0: leave alone). */
export function checkConntrackTimeout(ms: number): string | undefined {
  if (!Number.isFinite(ms) || ms < 0) return "must not be negative";
  if (ms % 1000 !== 0) return "must be whole seconds (the kernel counts seconds)";
  return ms / 1000 <= 2 ** 31 - 1 ? undefined : "must be at most 2147483647s";
}

/**
 * Checks a whole {@link Config}: every field, and the rules that tie fields together
 * (`minSyncPeriod <= syncPeriod`, an interface for `BridgeInterface` and `InterfaceNamePrefix`
 * local detection, a host name). Returns the config unchanged, or throws a
 * {@link ConfigError} naming the first problem.
 *
 * @example
 * ```ts
 * validateConfig({ ...DEFAULT_CONFIG, hostname: "node-1" }); // passes
 * validateConfig({ ...DEFAULT_CONFIG, hostname: "node-1", masqueradeBit: 40 });
 * // throws: nftables.masqueradeBit/--iptables-masquerade-bit is 40, must be 0-31
 * ```
 */
export function validateConfig(config: Config, options: ValidateConfigOptions = {}): Config {
  const describe = options.describe ?? ((key: keyof Config) => describeField(key, config.mode));
  const fail = (key: keyof Config, value: unknown, rule: string | undefined) => {
    if (rule !== undefined) throw invalidValue(describe(key), value, { rule });
  };
  if (config.mode !== "nft" && config.mode !== "iptables") {
    fail("mode", config.mode, "must be nft or iptables");
  }
  if (config.hostname === "") {
    fail("hostname", "", "must be set (no --hostname-override, hostnameOverride or NODE_NAME)");
  }
  fail("clusterCIDRs", config.clusterCIDRs.join(","), checkClusterCIDRs(config.clusterCIDRs));
  if (![...UPSTREAM_DETECT_LOCAL_MODES, "None"].includes(config.detectLocalMode)) {
    fail(
      "detectLocalMode",
      config.detectLocalMode,
      `must be one of ${detectLocalModeList} or None`,
    );
  }
  if (config.detectLocalMode === "BridgeInterface" && config.bridgeInterface === "") {
    fail(
      "detectLocalMode",
      config.detectLocalMode,
      `needs a bridge interface (${describeField("bridgeInterface", config.mode)})`,
    );
  }
  if (config.detectLocalMode === "InterfaceNamePrefix" && config.interfaceNamePrefix === "") {
    fail(
      "detectLocalMode",
      config.detectLocalMode,
      `needs an interface name prefix (${describeField("interfaceNamePrefix", config.mode)})`,
    );
  }
  for (const key of ["bridgeInterface", "interfaceNamePrefix"] as const) {
    fail(key, config[key], checkInterfaceName(config[key]));
  }
  const badEntry = checkNodePortAddresses(config.nodePortAddresses);
  if (badEntry !== undefined) {
    const entry = config.nodePortAddresses[badEntry.index];
    throw invalidValue(`${describe("nodePortAddresses")}[${badEntry.index}]`, entry, {
      rule: badEntry.rule,
    });
  }
  fail("masqueradeBit", config.masqueradeBit, checkMasqueradeBit(config.masqueradeBit));
  const sync = formatGoDuration(config.syncPeriodMs);
  const minSync = formatGoDuration(config.minSyncPeriodMs);
  fail("syncPeriodMs", sync, checkSyncPeriod(config.syncPeriodMs));
  fail("minSyncPeriodMs", minSync, checkMinSyncPeriod(config.minSyncPeriodMs));
  if (config.minSyncPeriodMs > config.syncPeriodMs) {
    fail(
      "minSyncPeriodMs",
      minSync,
      `must be less than or equal to the sync period (${sync}, ${describe("syncPeriodMs")})`,
    );
  }
  fail("bindAddress", config.bindAddress, checkBindAddress(config.bindAddress));
  fail("healthzBindAddress", config.healthzBindAddress, checkHostPort(config.healthzBindAddress));
  fail("metricsBindAddress", config.metricsBindAddress, checkHostPort(config.metricsBindAddress));
  fail("tableName", config.tableName, checkTableName(config.tableName));
  if (!["auto", "nft", "legacy"].includes(config.iptablesBackend)) {
    fail("iptablesBackend", config.iptablesBackend, "must be auto, nft or legacy");
  }
  fail("verbosity", config.verbosity, checkVerbosity(config.verbosity));
  fail("loggingFormat", config.loggingFormat, checkLoggingFormat(config.loggingFormat));
  fail("oomScoreAdj", config.oomScoreAdj, checkOomScoreAdj(config.oomScoreAdj));
  fail("kubeApiQps", config.kubeApiQps, checkQps(config.kubeApiQps));
  fail("kubeApiBurst", config.kubeApiBurst, checkBurst(config.kubeApiBurst));
  for (const key of ["maxClusterFileBytes", "maxListBytes", "maxWatchEventBytes"] as const) {
    fail(key, config[key], checkByteLimit(config[key]));
  }
  for (const key of ["conntrackMaxPerCore", "conntrackMin"] as const) {
    fail(key, config[key], checkConntrackCount(config[key]));
  }
  for (
    const key of [
      "conntrackTCPEstablishedTimeoutMs",
      "conntrackTCPCloseWaitTimeoutMs",
      "conntrackUDPTimeoutMs",
      "conntrackUDPStreamTimeoutMs",
    ] as const
  ) {
    fail(key, formatGoDuration(config[key]), checkConntrackTimeout(config[key]));
  }
  return config;
}

/**
 * The upstream name of a {@link Config} field, as the `KubeProxyConfiguration` key and the flag
 * that sets it: `iptables.masqueradeBit/--iptables-masquerade-bit` (just the flag for flag-only
 * fields). Sync periods are named
 * after the section and flags of `mode`.
 *
 * @example
 * ```ts
 * describeField("syncPeriodMs", "nft"); // "nftables.syncPeriod/--nftables-sync-period"
 * ```
 */
export function describeField(key: keyof Config, mode: ProxyMode): string {
  const section = mode === "iptables" ? "iptables" : "nftables";
  const names: Record<keyof Config, string> = {
    mode: "mode/--mode/--proxy-mode",
    hostname: "hostnameOverride/--hostname-override",
    clusterCIDRs: "clusterCIDR/--cluster-cidr",
    detectLocalMode: "detectLocalMode/--detect-local-mode",
    bridgeInterface: "detectLocal.bridgeInterface/--pod-bridge-interface",
    interfaceNamePrefix: "detectLocal.interfaceNamePrefix/--pod-interface-name-prefix",
    nodePortAddresses: "nodePortAddresses/--nodeport-addresses",
    masqueradeAll: `${section}.masqueradeAll/--masquerade-all`,
    masqueradeBit: `${section}.masqueradeBit/--iptables-masquerade-bit`,
    minSyncPeriodMs: `${section}.minSyncPeriod/--${section}-min-sync-period`,
    syncPeriodMs: `${section}.syncPeriod/--${section}-sync-period`,
    bindAddress: "bindAddress/--bind-address",
    healthzBindAddress: "healthzBindAddress/--healthz-bind-address",
    metricsBindAddress: "metricsBindAddress/--metrics-bind-address",
    bindAddressHardFail: "bindAddressHardFail/--bind-address-hard-fail",
    oomScoreAdj: "oomScoreAdj/--oom-score-adj",
    tableName: "--table-name",
    iptablesBackend: "--iptables-backend",
    kubeconfig: "clientConnection.kubeconfig/--kubeconfig",
    master: "--master",
    kubeApiQps: "clientConnection.qps/--kube-api-qps",
    kubeApiBurst: "clientConnection.burst/--kube-api-burst",
    fromFile: "--from-file",
    maxClusterFileBytes: "--max-cluster-file-bytes",
    maxListBytes: "--max-list-bytes",
    maxWatchEventBytes: "--max-watch-event-bytes",
    verbosity: "logging.verbosity/-v",
    loggingFormat: "logging.format/--logging-format",
    scheduler: "ipvs.scheduler/--scheduler",
    conntrackMaxPerCore: "conntrack.maxPerCore/--conntrack-max-per-core",
    conntrackMin: "conntrack.min/--conntrack-min",
    conntrackTCPEstablishedTimeoutMs:
      "conntrack.tcpEstablishedTimeout/--conntrack-tcp-timeout-established",
    conntrackTCPCloseWaitTimeoutMs:
      "conntrack.tcpCloseWaitTimeout/--conntrack-tcp-timeout-close-wait",
    conntrackTCPBeLiberal: "conntrack.tcpBeLiberal/--conntrack-tcp-be-liberal",
    conntrackUDPTimeoutMs: "conntrack.udpTimeout/--conntrack-udp-timeout",
    conntrackUDPStreamTimeoutMs: "conntrack.udpStreamTimeout/--conntrack-udp-timeout-stream",
  };
  return names[key];
}
