/**
 * Parsing the command line (DESIGN.md §5): flags, the `--config` file and the environment → one
 * validated {@link Config} plus the one-shot actions (`--once`, `--dry-run`, `--cleanup`, …).
 * The flags themselves are declared in flag_declarations.ts.
 *
 * Precedence is defaults < `--config` file < flags actually given. Upstream kube-proxy's flag
 * names are accepted with their meaning (`--proxy-mode`, `--cluster-cidr`, `-v`, …) and with
 * pflag's habits: `--flag=value` or `--flag value`, booleans as `--once` or `--once=false`,
 * list flags comma-separated and accumulated when repeated. The only I/O (reading the config
 * file, `NODE_NAME`, the host name) is injected for tests.
 *
 * @module
 */
import { CommanderError } from "@commander-js/extra-typings";
import { type Config, DEFAULT_CONFIG, type ProxyMode } from "./config.ts";
import { ConfigError, invalidValue } from "./config_error.ts";
import { parseGoDuration } from "./duration.ts";
import { declareFlags, type Flags } from "./flag_declarations.ts";
import { parseKubeProxyConfiguration, type UpstreamSection } from "./kubeproxy_config.ts";
import { type IpvsSettings, readIpvsSettings } from "./ipvs_mode.ts";
import { dropFlagsIgnoredWithConfig, readUpstreamFlags } from "./upstream_flags.ts";
import {
  checkBindAddress,
  checkClusterCIDRs,
  checkConntrackCount,
  checkConntrackTimeout,
  checkHostPort,
  checkMasqueradeBit,
  checkMinSyncPeriod,
  checkSyncPeriod,
  checkTableName,
  DEFAULT_PORTS,
  describeField,
  normalizeHostname,
  parseUpstreamDetectLocalMode,
  parseUpstreamProxyMode,
  validateConfig,
} from "./validation.ts";
import { appendPortIfNeeded, isUnspecifiedIP } from "./address_syntax.ts";
import { readTextFileBounded } from "../bounded_read.ts";

/**
 * The largest `--config` file read: 1 MiB, some two hundred times a kubeadm kube-proxy
 * ConfigMap, so that no file (or `/dev/zero`) costs more.
 */
export const MAX_CONFIG_FILE_BYTES = 2 ** 20;

/** Re-exported for `--write-config-to`; defined in kubeproxy_config.ts. */
export { toKubeProxyConfiguration } from "./kubeproxy_config.ts";

/** What the command line asks for besides running the proxy. */
export interface CommandLineActions {
  /** `--once`: one full sync, then exit. */
  once: boolean;
  /**
   * `--dry-run`: apply nothing; print the transaction that would bring the kernel's tables to
   * the wanted state (one sync, then exit).
   */
  dryRun: boolean;
  /** `--output`: how `--dry-run` prints — an nft script (`text`) or JSON. */
  output: "text" | "json";
  /** `--cleanup`: remove everything this proxy created, and kube-proxy's nft tables, then exit. */
  cleanup: boolean;
  /** `--cleanup-iptables`: remove the KUBE-* iptables rules kube-proxy left, then exit. */
  cleanupIptables: boolean;
  /**
   * `--init-only`: do the start-up work that needs more than CAP_NET_ADMIN (the conntrack
   * sysctls), then exit, as upstream's flag.
   */
  initOnly: boolean;
  /** `--write-config-to PATH`: write the configuration there and exit; "" when not asked. */
  writeConfigTo: string;
  /** `--version`: print the version and exit. */
  showVersion: boolean;
  /** `-h`/`--help`: print {@link helpText} and exit. */
  showHelp: boolean;
}

/** The result of {@link parseCommandLine}. */
export interface CommandLine {
  /** The validated configuration (defaults only, unvalidated, when help or version is asked). */
  config: Config;
  /** The one-shot actions asked for. */
  actions: CommandLineActions;
  /** One line per setting given that does not apply, and why (for the log). */
  warnings: string[];
  /** The `--config` file as read (its path and text), to notice a change; absent without one. */
  configFile?: { path: string; text: string };
}

/** The I/O {@link parseCommandLine} needs, injectable for tests. */
export interface ParseCommandLineOptions {
  /** Reads the `--config` file. Default: at most {@link MAX_CONFIG_FILE_BYTES} of it. */
  readFile?: (path: string) => Promise<string>;
  /** Reads an environment variable (`NODE_NAME`). Default: `Deno.env.get`. */
  env?: (name: string) => string | undefined;
  /** The machine's host name. Default: `Deno.hostname`. */
  hostname?: () => string;
}

/**
 * Parses the command line (`Deno.args`) into a validated {@link Config} and the actions asked
 * for, reading `--config` if given.
 *
 * The node name is `--hostname-override`, else the file's `hostnameOverride`, else `NODE_NAME`,
 * else the host name, trimmed and lowercased like kube-proxy does. With `--help` or
 * `--version` nothing is read or validated. Throws {@link ConfigError} for an unknown flag, a
 * bad value, an unreadable or invalid config file, or contradicting settings.
 *
 * @example
 * ```ts
 * const { config, actions } = await parseCommandLine(
 *   ["--mode=iptables", "--config", "/var/lib/kube-proxy/config.conf", "--once"],
 * );
 * if (actions.once) console.log(`one sync in ${config.mode} mode`);
 * ```
 */
export async function parseCommandLine(
  argv: readonly string[],
  options: ParseCommandLineOptions = {},
): Promise<CommandLine> {
  const program = declareFlags();
  try {
    program.parse([...argv], { from: "user" });
  } catch (error) {
    if (error instanceof CommanderError) {
      throw new ConfigError(`command line: ${error.message.replace(/^error: /, "")}`, {
        cause: error,
      });
    }
    throw error;
  }
  const flags = program.opts();
  const actions: CommandLineActions = {
    once: parseBooleanFlag("--once", flags.once),
    dryRun: parseBooleanFlag("--dry-run", flags.dryRun),
    output: flags.output ?? "text",
    cleanup: parseBooleanFlag("--cleanup", flags.cleanup),
    cleanupIptables: parseBooleanFlag("--cleanup-iptables", flags.cleanupIptables),
    initOnly: parseBooleanFlag("--init-only", flags.initOnly),
    writeConfigTo: flags.writeConfigTo ?? "",
    showVersion: flags.version === true,
    showHelp: flags.help === true,
  };
  if (actions.showHelp || actions.showVersion) {
    return { config: copyConfig(DEFAULT_CONFIG), actions, warnings: [] };
  }

  const warnings: string[] = [];
  const configPath = flags.config ?? "";
  // As upstream, the file replaces what these flags would set.
  if (configPath !== "") warnings.push(...dropFlagsIgnoredWithConfig(flags, configPath));
  const flagMode = readModeFlags(flags.mode, flags.proxyMode);
  // `--proxy-mode=ipvs` runs nft mode with ipvs's settings (ipvs_mode.ts).
  const ipvsByFlag = flags.proxyMode === "ipvs";
  let fileUpstreamSection: UpstreamSection | undefined;
  const origins: Partial<Record<keyof Config, string>> = {};
  let fromFile: Partial<Config> = {};
  let configFile: CommandLine["configFile"];
  if (configPath !== "") {
    const readFile = options.readFile ??
      ((path: string) => readTextFileBounded(path, MAX_CONFIG_FILE_BYTES));
    let text: string;
    try {
      text = await readFile(configPath);
    } catch (error) {
      throw new ConfigError(`config ${configPath}: cannot read: ${(error as Error).message}`, {
        cause: error,
      });
    }
    configFile = { path: configPath, text };
    fromFile = parseKubeProxyConfiguration(text, {
      source: configPath,
      mode: ipvsByFlag ? "ipvs" : flagMode,
      onWarning: (line) => warnings.push(line),
      onSection: (section) => fileUpstreamSection = section,
    });
  }
  const mode = flagMode ?? fromFile.mode ?? DEFAULT_CONFIG.mode;
  const ipvsMode = ipvsByFlag || (flagMode === undefined && fileUpstreamSection === "ipvs");
  // The file's section is that of its own mode, "" being kube-proxy's default, iptables.
  const fileSection = flagMode ?? fromFile.mode ?? "iptables";
  for (const key of Object.keys(fromFile) as (keyof Config)[]) {
    const sync = ipvsMode && (key === "syncPeriodMs" || key === "minSyncPeriodMs");
    const name = sync
      ? `ipvs.${key === "syncPeriodMs" ? "syncPeriod" : "minSyncPeriod"}`
      : describeField(key, fileSection).replace(/\/.*$/, "");
    origins[key] = `config ${configPath}: ${name}`;
  }
  const fromFlags = readValueFlags(flags, ipvsMode ? "ipvs" : mode);
  for (const [key, flag] of fromFlags.origins) origins[key] = `flag ${flag}`;
  const upstream = readUpstreamFlags(flags, {
    healthzBindAddress: fromFlags.values.healthzBindAddress ?? DEFAULT_CONFIG.healthzBindAddress,
    metricsBindAddress: fromFlags.values.metricsBindAddress ?? DEFAULT_CONFIG.metricsBindAddress,
  });
  for (const [key, flag] of upstream.origins) origins[key] = `flag ${flag}`;
  warnings.push(...upstream.warnings);
  const fromIpvsFlags = readIpvsFlags(flags, { ipvsMode, mode });
  for (const [key, flag] of fromIpvsFlags.origins) origins[key] = `flag ${flag}`;
  warnings.push(...fromIpvsFlags.warnings);

  const config = copyConfig({
    ...DEFAULT_CONFIG,
    ...fromFile,
    ...fromIpvsFlags.values,
    ...fromFlags.values,
    ...upstream.values,
    mode,
  });
  if (flagMode !== undefined) {
    origins.mode = flags.mode !== undefined ? "flag --mode" : "flag --proxy-mode";
  }
  if (config.hostname === "") {
    const env = options.env ?? ((name: string) => Deno.env.get(name));
    config.hostname = normalizeHostname(env("NODE_NAME") ?? "");
    origins.hostname = "environment NODE_NAME";
    if (config.hostname === "") {
      config.hostname = normalizeHostname((options.hostname ?? (() => Deno.hostname()))());
      origins.hostname = "the host name";
    }
  }
  return {
    config: validateConfig(config, {
      describe: (key) => origins[key] ?? `default ${describeField(key, config.mode)}`,
    }),
    actions,
    warnings,
    ...(configFile === undefined ? {} : { configFile }),
  };
}

/**
 * The `--help` text: usage, then every flag with its meaning and default. Also what `main.ts`
 * prints for `--help`, and what the docs are compared against.
 *
 * @example
 * ```ts
 * console.log(helpText());
 * ```
 */
export function helpText(): string {
  return declareFlags().helpInformation();
}

/** A boolean flag's value: absent → false, bare → true, else pflag's ParseBool spellings. */
function parseBooleanFlag(flag: string, value: string | true | undefined): boolean {
  if (value === undefined) return false;
  if (value === true) return true;
  if (["1", "t", "T", "true", "TRUE", "True"].includes(value)) return true;
  if (["0", "f", "F", "false", "FALSE", "False"].includes(value)) return false;
  throw invalidValue(`flag ${flag}`, value, { rule: "must be true or false" });
}

/** A duration flag's value in ms; the error names the flag and gives `examples`. */
function durationFlag(flag: string, text: string, examples: string): number {
  try {
    return parseGoDuration(text);
  } catch (error) {
    throw invalidValue(`flag ${flag}`, text, {
      rule: `must be a duration such as ${examples} (${(error as Error).message})`,
      cause: error,
    });
  }
}

/** The mode set by `--mode` and/or `--proxy-mode`, which must agree. */
function readModeFlags(
  mode: string | undefined,
  proxyMode: string | undefined,
): ProxyMode | undefined {
  if (mode !== undefined && mode !== "nft" && mode !== "iptables") {
    throw invalidValue("flag --mode", mode, { rule: "must be nft or iptables" });
  }
  const upstream = proxyMode === undefined
    ? undefined
    : parseUpstreamProxyMode(proxyMode, "flag --proxy-mode");
  if (mode !== undefined && upstream !== undefined && mode !== upstream) {
    throw invalidValue("flag --proxy-mode", proxyMode, {
      rule: `must agree with --mode=${mode} (give one of them)`,
    });
  }
  return mode ?? upstream;
}

/** The values set by flags (other than the mode), each checked, and the flag behind each. */
function readValueFlags(
  flags: Flags,
  mode: ProxyMode | "ipvs",
): { values: Partial<Config>; origins: [keyof Config, string][] } {
  const values: Partial<Config> = {};
  const origins: [keyof Config, string][] = [];
  const set = <K extends keyof Config>(key: K, value: Config[K], flag: string) => {
    values[key] = value;
    origins.push([key, flag]);
  };
  const check = (flag: string, value: unknown, rule: string | undefined) => {
    if (rule !== undefined) throw invalidValue(`flag ${flag}`, value, { rule });
  };

  if (flags.hostnameOverride !== undefined) {
    const hostname = normalizeHostname(flags.hostnameOverride);
    if (hostname !== "") set("hostname", hostname, "--hostname-override");
  }
  if (flags.bindAddress !== undefined) {
    const address = flags.bindAddress;
    check(
      "--bind-address",
      address,
      address === "" ? "must be an IP address" : checkBindAddress(address),
    );
    set("bindAddress", isUnspecifiedIP(address) ? "" : address, "--bind-address");
  }
  if (flags.clusterCidr !== undefined) {
    const cidrs = flags.clusterCidr === "" ? [] : flags.clusterCidr.split(",");
    check("--cluster-cidr", flags.clusterCidr, checkClusterCIDRs(cidrs));
    set("clusterCIDRs", cidrs, "--cluster-cidr");
  }
  if (flags.nodeportAddresses !== undefined) {
    const entries = flags.nodeportAddresses.flatMap((value) =>
      value === "" ? [] : value.split(",")
    );
    set("nodePortAddresses", entries, "--nodeport-addresses");
  }
  if (flags.masqueradeAll !== undefined) {
    set(
      "masqueradeAll",
      parseBooleanFlag("--masquerade-all", flags.masqueradeAll),
      "--masquerade-all",
    );
  }
  if (flags.iptablesMasqueradeBit !== undefined) {
    const text = flags.iptablesMasqueradeBit;
    const bit = /^[+-]?\d+$/.test(text) ? Number(text) : Number.NaN;
    check("--iptables-masquerade-bit", Number.isNaN(bit) ? text : bit, checkMasqueradeBit(bit));
    set("masqueradeBit", bit, "--iptables-masquerade-bit");
  }
  // As upstream, --iptables-* set the periods in every mode; --nftables-* (ours) only in nft
  // mode, where they win over --iptables-*.
  const durations = [
    ["iptables", "sync", flags.iptablesSyncPeriod],
    ["iptables", "min-sync", flags.iptablesMinSyncPeriod],
    ["nftables", "sync", flags.nftablesSyncPeriod],
    ["nftables", "min-sync", flags.nftablesMinSyncPeriod],
  ] as const;
  for (const [section, kind, text] of durations) {
    if (text === undefined) continue;
    const flag = `--${section}-${kind}-period`;
    const ms = durationFlag(flag, text, "30s, 1m0s or 500ms");
    check(flag, text, kind === "sync" ? checkSyncPeriod(ms) : checkMinSyncPeriod(ms));
    // As upstream: --iptables-* apply in every mode but ipvs (whose --ipvs-* flags are read
    // apart); --nftables-* only in nft mode, over them.
    if (section === "nftables" ? mode !== "nft" : mode === "ipvs") continue;
    set(kind === "sync" ? "syncPeriodMs" : "minSyncPeriodMs", ms, flag);
  }
  const counts = [
    ["conntrackMaxPerCore", "--conntrack-max-per-core", flags.conntrackMaxPerCore],
    ["conntrackMin", "--conntrack-min", flags.conntrackMin],
  ] as const;
  for (const [key, flag, text] of counts) {
    if (text === undefined) continue;
    const value = /^\d+$/.test(text) ? Number(text) : Number.NaN;
    check(flag, text, Number.isNaN(value) ? "must be a whole number" : checkConntrackCount(value));
    set(key, value, flag);
  }
  const timeouts = [
    [
      "conntrackTCPEstablishedTimeoutMs",
      "--conntrack-tcp-timeout-established",
      flags.conntrackTcpTimeoutEstablished,
    ],
    [
      "conntrackTCPCloseWaitTimeoutMs",
      "--conntrack-tcp-timeout-close-wait",
      flags.conntrackTcpTimeoutCloseWait,
    ],
    ["conntrackUDPTimeoutMs", "--conntrack-udp-timeout", flags.conntrackUdpTimeout],
    [
      "conntrackUDPStreamTimeoutMs",
      "--conntrack-udp-timeout-stream",
      flags.conntrackUdpTimeoutStream,
    ],
  ] as const;
  for (const [key, flag, text] of timeouts) {
    if (text === undefined) continue;
    const ms = durationFlag(flag, text, "24h0m0s or 1h");
    check(flag, text, checkConntrackTimeout(ms));
    set(key, ms, flag);
  }
  if (flags.conntrackTcpBeLiberal !== undefined) {
    const flag = "--conntrack-tcp-be-liberal";
    set("conntrackTCPBeLiberal", parseBooleanFlag(flag, flags.conntrackTcpBeLiberal), flag);
  }
  if (flags.iptablesBackend !== undefined) {
    set("iptablesBackend", flags.iptablesBackend, "--iptables-backend");
  }
  const servers = [
    [
      "healthzBindAddress",
      "--healthz-bind-address",
      flags.healthzBindAddress,
      DEFAULT_PORTS.healthz,
    ],
    [
      "metricsBindAddress",
      "--metrics-bind-address",
      flags.metricsBindAddress,
      DEFAULT_PORTS.metrics,
    ],
  ] as const;
  for (const [key, flag, text, port] of servers) {
    if (text === undefined) continue;
    const address = appendPortIfNeeded(text, port);
    check(flag, text, checkHostPort(address));
    set(key, address, flag);
  }
  if (flags.detectLocalMode !== undefined) {
    const detectLocalMode = parseUpstreamDetectLocalMode(
      flags.detectLocalMode,
      "flag --detect-local-mode",
    );
    if (detectLocalMode !== undefined) {
      set("detectLocalMode", detectLocalMode, "--detect-local-mode");
    }
  }
  const strings = [
    ["bridgeInterface", "--pod-bridge-interface", flags.podBridgeInterface],
    ["interfaceNamePrefix", "--pod-interface-name-prefix", flags.podInterfaceNamePrefix],
    ["kubeconfig", "--kubeconfig", flags.kubeconfig],
    ["master", "--master", flags.master],
    ["fromFile", "--from-file", flags.fromFile],
  ] as const;
  for (const [key, flag, text] of strings) {
    if (text !== undefined) set(key, text, flag);
  }
  if (flags.tableName !== undefined) {
    check("--table-name", flags.tableName, checkTableName(flags.tableName));
    set("tableName", flags.tableName, "--table-name");
  }
  if (flags.v !== undefined) {
    const text = flags.v.replace(/^=/, ""); // pflag reads `-v=2` as 2
    check("-v", flags.v, /^\d+$/.test(text) ? undefined : "must be a whole number >= 0");
    set("verbosity", Number(text), "-v");
  }
  return { values, origins };
}

/**
 * The `--ipvs-*` flags (through ipvs_mode.ts: in ipvs mode the sync periods and the scheduler
 * apply, the rest is named as ignored; in other modes all are ignored, as upstream does) and
 * our `--scheduler`, which overrides `--ipvs-scheduler` and has no effect in iptables mode.
 */
function readIpvsFlags(
  flags: Flags,
  context: { ipvsMode: boolean; mode: ProxyMode },
): { values: Partial<Config>; origins: [keyof Config, string][]; warnings: string[] } {
  const given: IpvsSettings = {};
  const durations = [
    ["syncPeriodMs", "--ipvs-sync-period", flags.ipvsSyncPeriod],
    ["minSyncPeriodMs", "--ipvs-min-sync-period", flags.ipvsMinSyncPeriod],
    ["tcpTimeoutMs", "--ipvs-tcp-timeout", flags.ipvsTcpTimeout],
    ["tcpFinTimeoutMs", "--ipvs-tcpfin-timeout", flags.ipvsTcpfinTimeout],
    ["udpTimeoutMs", "--ipvs-udp-timeout", flags.ipvsUdpTimeout],
  ] as const;
  for (const [key, flag, text] of durations) {
    if (text === undefined) continue;
    const ms = durationFlag(flag, text, "30s, 1m0s or 500ms");
    if (ms !== 0) given[key] = ms;
  }
  if (flags.ipvsScheduler !== undefined && flags.ipvsScheduler !== "") {
    given.scheduler = flags.ipvsScheduler;
  }
  if (flags.ipvsExcludeCidrs !== undefined) {
    const cidrs = flags.ipvsExcludeCidrs.flatMap((v) => v === "" ? [] : v.split(","));
    if (cidrs.length > 0) given.excludeCIDRs = cidrs;
  }
  if (parseBooleanFlag("--ipvs-strict-arp", flags.ipvsStrictArp)) given.strictARP = true;
  // Without a file, ipvs mode by flag says its one warning (and sets ipvs's default
  // scheduler) here; with a file, the file's ipvs section did, and flags only override.
  const alone = context.ipvsMode && flags.config === undefined;
  const ipvs = readIpvsSettings(given, {
    inUse: context.ipvsMode,
    defaultScheduler: alone,
    from: "flags",
    where: "command line",
    whyNot: `the mode is ${context.mode}, and --ipvs-* flags apply only in ipvs mode ` +
      "(--scheduler chooses nft mode's scheduler)",
  });
  const values: Partial<Config> = {};
  const origins: [keyof Config, string][] = [];
  const flagOf = {
    syncPeriodMs: "--ipvs-sync-period",
    minSyncPeriodMs: "--ipvs-min-sync-period",
    scheduler: "--ipvs-scheduler",
  } as const;
  for (const key of ["syncPeriodMs", "minSyncPeriodMs", "scheduler"] as const) {
    if (ipvs.config[key] === undefined) continue;
    Object.assign(values, { [key]: ipvs.config[key] });
    if (given[key] !== undefined) origins.push([key, flagOf[key]]);
  }
  const said = alone || Object.keys(given).length > 0;
  const warnings = said && ipvs.warning !== undefined ? [ipvs.warning] : [];
  if (flags.scheduler !== undefined) {
    values.scheduler = flags.scheduler;
    origins.push(["scheduler", "--scheduler"]);
    if (context.mode === "iptables") {
      warnings.push(
        `command line: ignoring --scheduler=${flags.scheduler}: it applies to nft mode only; ` +
          "iptables mode picks endpoints at random (statistic mode random), as kube-proxy's " +
          "iptables mode does",
      );
    }
  }
  return { values, origins, warnings };
}

/** A copy of `config` that shares no arrays with it. */
function copyConfig(config: Readonly<Config>): Config {
  return {
    ...config,
    clusterCIDRs: [...config.clusterCIDRs],
    nodePortAddresses: [...config.nodePortAddresses],
  };
}
