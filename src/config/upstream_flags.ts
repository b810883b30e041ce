/**
 * The rest of upstream kube-proxy's command line: the flags beyond the proxy options that
 * flags.ts reads — process and logging flags, the API client's, the deprecated ports, and those
 * that exist upstream but have no effect here — and which flags upstream ignores when `--config`
 * is given. Each flag is checked as upstream checks it; one that has no effect here gives one
 * warning saying why, never silence.
 *
 * @module
 */
import type { Config } from "./config.ts";
import { invalidValue } from "./config_error.ts";
import { parseGoDuration } from "./duration.ts";
import type { Flags } from "./flag_declarations.ts";
import { appendPortIfNeeded, splitHostPort } from "./address_syntax.ts";
import {
  checkBurst,
  checkByteLimit,
  checkLoggingFormat,
  checkOomScoreAdj,
  checkQps,
} from "./validation.ts";

/**
 * The flags upstream documents as "ignored if a config file is specified by --config" (and the
 * deprecated ports, which it applies only without one), by their key in {@link Flags}.
 */
export const IGNORED_WITH_CONFIG: readonly (readonly [keyof Flags, string])[] = [
  ["featureGates", "--feature-gates"],
  ["bindAddress", "--bind-address"],
  ["healthzBindAddress", "--healthz-bind-address"],
  ["metricsBindAddress", "--metrics-bind-address"],
  ["healthzPort", "--healthz-port"],
  ["metricsPort", "--metrics-port"],
  ["profiling", "--profiling"],
  ["showHiddenMetricsForVersion", "--show-hidden-metrics-for-version"],
  ["proxyMode", "--proxy-mode"],
  ["detectLocalMode", "--detect-local-mode"],
  ["clusterCidr", "--cluster-cidr"],
  ["nodeportAddresses", "--nodeport-addresses"],
  ["oomScoreAdj", "--oom-score-adj"],
];

/**
 * Removes from `flags` those upstream ignores when `--config` is given; returns one warning
 * naming the ones that were given (none when none were).
 *
 * @example
 * ```ts
 * const flags = { clusterCidr: "10.0.0.0/8", mode: "nft" };
 * dropFlagsIgnoredWithConfig(flags, "kube-proxy.yaml"); // ["ignoring flags --cluster-cidr: …"]
 * flags; // { mode: "nft" }
 * ```
 */
export function dropFlagsIgnoredWithConfig(flags: Flags, configPath: string): string[] {
  const dropped: string[] = [];
  for (const [key, name] of IGNORED_WITH_CONFIG) {
    if (flags[key] === undefined) continue;
    delete flags[key];
    dropped.push(name);
  }
  if (dropped.length === 0) return [];
  return [
    `ignoring flags ${dropped.join(", ")}: upstream kube-proxy ignores them when a config ` +
    `file is given (--config ${configPath}); set the file's fields instead`,
  ];
}

/** What {@link readUpstreamFlags} found. */
export interface UpstreamFlags {
  /** The {@link Config} fields the flags set. */
  values: Partial<Config>;
  /** The flag behind each value, for messages. */
  origins: [keyof Config, string][];
  /** One line per flag given that has no effect here, saying why. */
  warnings: string[];
}

/**
 * Reads the flags of this module's doc from `flags` (`healthzBindAddress` and
 * `metricsBindAddress` are the addresses the deprecated port flags rewrite: those set by flag,
 * else the defaults). Throws {@link ConfigError} naming the flag for a bad value.
 *
 * @example
 * ```ts
 * readUpstreamFlags({ loggingFormat: "json", profiling: true }, DEFAULT_CONFIG).warnings;
 * // ["flag --profiling has no effect: no /debug/pprof here (it is Go's profiler)"]
 * ```
 */
export function readUpstreamFlags(
  flags: Flags,
  servers: Pick<Config, "healthzBindAddress" | "metricsBindAddress">,
): UpstreamFlags {
  const out: UpstreamFlags = { values: {}, origins: [], warnings: [] };
  const set = <K extends keyof Config>(key: K, value: Config[K], flag: string) => {
    out.values[key] = value;
    out.origins.push([key, flag]);
  };
  const noEffect = (flag: string, why: string) =>
    out.warnings.push(`flag ${flag} has no effect: ${why}`);

  if (flags.bindAddressHardFail !== undefined) {
    const flag = "--bind-address-hard-fail";
    set("bindAddressHardFail", readBoolean(flag, flags.bindAddressHardFail), flag);
  }
  if (flags.oomScoreAdj !== undefined) {
    const value = readInteger("--oom-score-adj", flags.oomScoreAdj);
    reject("--oom-score-adj", value, checkOomScoreAdj(value));
    set("oomScoreAdj", value, "--oom-score-adj");
  }
  const ports = [
    ["healthzBindAddress", "--healthz-port", flags.healthzPort, "--healthz-bind-address"],
    ["metricsBindAddress", "--metrics-port", flags.metricsPort, "--metrics-bind-address"],
  ] as const;
  for (const [key, flag, text, replacement] of ports) {
    if (text === undefined) continue;
    const port = readInteger(flag, text);
    reject(flag, text, port >= 0 && port <= 65535 ? undefined : "must be 0-65535");
    set(key, addressFromDeprecatedPort(servers[key], port), flag);
    out.warnings.push(`flag ${flag} is deprecated: use ${replacement}`);
  }
  const limits = [
    ["maxClusterFileBytes", "--max-cluster-file-bytes", flags.maxClusterFileBytes],
    ["maxListBytes", "--max-list-bytes", flags.maxListBytes],
    ["maxWatchEventBytes", "--max-watch-event-bytes", flags.maxWatchEventBytes],
  ] as const;
  for (const [key, flag, text] of limits) {
    if (text === undefined) continue;
    const bytes = parseBytes(text);
    reject(flag, text, checkByteLimit(bytes));
    set(key, bytes, flag);
  }

  if (flags.loggingFormat !== undefined) {
    reject("--logging-format", flags.loggingFormat, checkLoggingFormat(flags.loggingFormat));
    set("loggingFormat", flags.loggingFormat as Config["loggingFormat"], "--logging-format");
  }
  if (flags.logFlushFrequency !== undefined) {
    // Lines are written as they are logged, so the longest wait is met whatever it is.
    readDuration("--log-flush-frequency", flags.logFlushFrequency);
  }
  if (flags.vmodule !== undefined && flags.vmodule !== "") {
    for (const entry of flags.vmodule.split(",")) {
      reject(
        "--vmodule",
        flags.vmodule,
        /^[^=]+=\d+$/.test(entry) ? undefined : "must be pattern=N,...",
      );
    }
    noEffect("--vmodule", "no per-file verbosity here: -v applies to every line");
  }
  for (const format of ["text", "json"] as const) {
    const split = format === "text" ? flags.logTextSplitStream : flags.logJsonSplitStream;
    const splitFlag = `--log-${format}-split-stream`;
    if (readBoolean(splitFlag, split)) noEffect(splitFlag, "every log line goes to stderr");
    const buffer = format === "text" ? flags.logTextInfoBufferSize : flags.logJsonInfoBufferSize;
    const bufferFlag = `--log-${format}-info-buffer-size`;
    if (buffer !== undefined) {
      const bytes = parseBytes(buffer);
      reject(
        bufferFlag,
        buffer,
        Number.isSafeInteger(bytes) ? undefined : "must be a quantity such as 0, 64Ki or 1Mi",
      );
      if (bytes !== 0) noEffect(bufferFlag, "log lines are written unbuffered");
    }
  }

  for (const text of flags.featureGates ?? []) {
    for (const entry of text.split(",").filter((item) => item.trim() !== "")) {
      const [name, value = ""] = entry.split("=", 2).map((part) => part.trim());
      reject(
        "--feature-gates",
        text,
        name !== "" && isBoolean(value) ? undefined : "must be Gate=true|false,...",
      );
    }
    noEffect(
      `--feature-gates=${text}`,
      "kube-nftproxy has no feature gates (it behaves as upstream with its gates at their defaults)",
    );
  }
  const contentType = flags.kubeApiContentType;
  if (contentType !== undefined && contentType !== "application/json") {
    noEffect(`--kube-api-content-type=${contentType}`, "the API server is always read as JSON");
  }
  if (flags.kubeApiQps !== undefined) {
    const qps = flags.kubeApiQps.trim() === "" ? Number.NaN : Number(flags.kubeApiQps);
    reject("--kube-api-qps", flags.kubeApiQps, checkQps(qps));
    set("kubeApiQps", qps, "--kube-api-qps");
  }
  if (flags.kubeApiBurst !== undefined) {
    const burst = readInteger("--kube-api-burst", flags.kubeApiBurst);
    reject("--kube-api-burst", burst, checkBurst(burst));
    set("kubeApiBurst", burst, "--kube-api-burst");
  }
  if (flags.configSyncPeriod !== undefined) {
    const ms = readDuration("--config-sync-period", flags.configSyncPeriod);
    reject(
      "--config-sync-period",
      flags.configSyncPeriod,
      ms > 0 ? undefined : "must be greater than 0",
    );
    noEffect(
      "--config-sync-period",
      "the watches need no periodic resync (the sync period forces full syncs)",
    );
  }
  if (readBoolean("--profiling", flags.profiling)) {
    noEffect("--profiling", "no /debug/pprof here (it is Go's profiler)");
  }
  if (flags.showHiddenMetricsForVersion !== undefined && flags.showHiddenMetricsForVersion !== "") {
    noEffect("--show-hidden-metrics-for-version", "kube-nftproxy hides no metrics");
  }
  if (flags.iptablesLocalhostNodeports !== undefined) {
    const flag = "--iptables-localhost-nodeports";
    if (readBoolean(flag, flags.iptablesLocalhostNodeports)) {
      noEffect(flag, "node ports are never served on 127.0.0.1 here (no route_localnet)");
    }
  }
  return out;
}

/**
 * What a deprecated port flag makes of a server address: port 0 disables the server (""), any
 * other port replaces the address's port (a disabled server listens on 0.0.0.0 again).
 */
function addressFromDeprecatedPort(address: string, port: number): string {
  if (port === 0) return "";
  const host = splitHostPort(address)?.host ?? (address === "" ? "0.0.0.0" : address);
  return appendPortIfNeeded(host, port);
}

/**
 * A byte count as a whole number or a Kubernetes binary quantity (`64Ki`, `128Mi`, `1Gi`);
 * NaN for anything else.
 */
export function parseBytes(text: string): number {
  const match = /^(\d+)(Ki|Mi|Gi)?$/.exec(text.trim());
  if (match === null) return Number.NaN;
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30 }[match[2] ?? ""] ?? 1;
  return Number(match[1]) * unit;
}

function reject(flag: string, value: unknown, rule: string | undefined): void {
  if (rule !== undefined) throw invalidValue(`flag ${flag}`, value, { rule });
}

function isBoolean(text: string): boolean {
  return ["1", "t", "T", "true", "TRUE", "True", "0", "f", "F", "false", "FALSE", "False"]
    .includes(text);
}

/** A boolean flag: absent → false, bare → true, else pflag's ParseBool spellings. */
function readBoolean(flag: string, value: string | true | undefined): boolean {
  if (value === undefined) return false;
  if (value === true) return true;
  reject(flag, value, isBoolean(value) ? undefined : "must be true or false");
  return ["1", "t", "T", "true", "TRUE", "True"].includes(value);
}

function readInteger(flag: string, text: string): number {
  const value = /^[+-]?\d+$/.test(text) ? Number(text) : Number.NaN;
  reject(flag, text, Number.isSafeInteger(value) ? undefined : "must be a whole number");
  return value;
}

function readDuration(flag: string, text: string): number {
  try {
    return parseGoDuration(text);
  } catch (error) {
    throw invalidValue(`flag ${flag}`, text, {
      rule: `must be a duration such as 5s or 15m0s (${(error as Error).message})`,
      cause: error,
    });
  }
}
