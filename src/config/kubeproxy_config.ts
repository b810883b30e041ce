/**
 * kube-proxy's configuration file, `KubeProxyConfiguration` (`kubeproxy.config.k8s.io/v1alpha1`),
 * in both directions: the YAML text (or a kubeadm ConfigMap holding it) → the part of
 * {@link Config} the file sets, and a {@link Config} → YAML that kube-proxy and this parser read.
 * What each field means for {@link Config} is decided here; reading the YAML strictly and typed
 * is kubeproxy_yaml.ts's.
 *
 * The file follows upstream's schema and decoding rules, quirks included:
 * - decoding is strict first and lenient when only strictness fails, as upstream's v1alpha1
 *   decoding: unknown fields (removed ones such as `udpIdleTimeout`, misspelt ones) and
 *   duplicate keys (the last wins) are reported in one warning and the file still loads; a
 *   wrong type or a bad value stays an error naming the field;
 * - every upstream field this proxy has no use for (winkernel, featureGates, enableProfiling, …)
 *   is accepted, and when set reported once as ignored, saying why (unused_fields.ts);
 * - `mode: ipvs` runs the nftables back end with the `ipvs:` section's sync periods and
 *   scheduler, and one warning naming what of that section has no nftables meaning
 *   (ipvs_mode.ts); outside ipvs mode the `ipvs:` section is only type-checked;
 * - in `conntrack:`, a `null` (or absent) `maxPerCore`, `min`, `tcpEstablishedTimeout` or
 *   `tcpCloseWaitTimeout` is the default (they are pointers upstream), and 0 means "leave the
 *   kernel's value alone";
 * - Go zero values mean "unset, use the default": `syncPeriod: 0s`, `masqueradeAll: false`,
 *   `healthzBindAddress: ""`, `bindAddress: 0.0.0.0`; a `null` masqueradeBit is the default 14
 *   but `0` is bit 0 (it is a pointer upstream);
 * - `masqueradeAll`, `masqueradeBit`, `syncPeriod` and `minSyncPeriod` come from the `iptables:`
 *   or `nftables:` section of the mode in use (in ipvs mode the sync periods come from `ipvs:`,
 *   `masqueradeAll` and `masqueradeBit` from `iptables:`, as upstream's ipvs proxier reads
 *   them); the other section is only type-checked;
 * - a `null` duration is an error (`metav1.Duration` parses it as `""`), durations must be
 *   strings, and YAML 1.1 booleans (`yes`, `off`) are booleans, as in Go's YAML reader.
 *
 * @module
 */
import { dump } from "js-yaml";
import { type Config, DEFAULT_CONFIG, type LoggingFormat, type ProxyMode } from "./config.ts";
import { unusedFields } from "./unused_fields.ts";
import { ConfigError, invalidValue } from "./config_error.ts";
import { formatGoDuration } from "./duration.ts";
import {
  configMapPayload,
  Fields,
  IGNORED_MAPPING_FIELDS,
  isMapping,
  KUBE_PROXY_API_VERSION,
  KUBEADM_CONFIG_KEY,
  loadYaml,
  SECTION_FIELDS,
  type StrictnessIssues,
  TOP_LEVEL_FIELDS,
} from "./kubeproxy_yaml.ts";
import {
  checkBindAddress,
  checkBurst,
  checkClusterCIDRs,
  checkConntrackCount,
  checkConntrackTimeout,
  checkHostPort,
  checkLoggingFormat,
  checkMasqueradeBit,
  checkMinSyncPeriod,
  checkNodePortAddresses,
  checkOomScoreAdj,
  checkSyncPeriod,
  checkVerbosity,
  DEFAULT_PORTS,
  describeField,
  normalizeHostname,
  parseUpstreamDetectLocalMode,
  parseUpstreamProxyMode,
} from "./validation.ts";
import { appendPortIfNeeded, ipFamily, isUnspecifiedIP } from "./address_syntax.ts";
import { IPVS_SECTION_FIELDS, type IpvsSettings, readIpvsSettings } from "./ipvs_mode.ts";

/** The section of the file whose settings apply: that of the upstream mode in use. */
export type UpstreamSection = "iptables" | "nftables" | "ipvs";

/** Options of {@link parseKubeProxyConfiguration}. */
export interface ParseKubeProxyConfigurationOptions {
  /** Name of the file, shown in error messages as `config <source>: …`. Default: none. */
  source?: string;
  /**
   * The mode the proxy will run in when it is already decided elsewhere (an explicit `--mode`,
   * or `ipvs` for `--proxy-mode=ipvs`); it picks the `iptables:`, `nftables:` or `ipvs:`
   * section. Default: the section of the file's own `mode` as upstream reads it — `nftables:`
   * for `nftables`, `ipvs:` for `ipvs`, `iptables:` for `iptables` and for an empty mode
   * (upstream's default, iptables), even though an empty mode runs nft here.
   */
  mode?: ProxyMode | "ipvs";
  /**
   * Receives one line per kind of setting the file gives that does not apply: a masquerade or
   * sync setting in the section of the mode not in use; upstream fields that have no effect
   * here; once, the unknown and duplicate fields lenient decoding skipped; and in ipvs mode
   * the one line saying what of the `ipvs:` section applies and what does not. Default:
   * dropped.
   */
  onWarning?: (line: string) => void;
  /** Receives the section whose settings apply (`ipvs` when the file's mode is ipvs). */
  onSection?: (section: UpstreamSection) => void;
}

/**
 * Reads a `KubeProxyConfiguration` YAML document, or a ConfigMap holding one under
 * `data["config.conf"]` (kubeadm's `kube-system/kube-proxy`), into the {@link Config} fields
 * it sets. Fields the file leaves unset (absent, or Go's zero value) are absent from the result,
 * so `{...DEFAULT_CONFIG, ...fromFile, ...fromFlags}` gives the right precedence.
 *
 * Each value is checked on its own; rules that tie fields together (minSyncPeriod ≤
 * syncPeriod, an interface for BridgeInterface detection) are checked on the merged config by
 * `validateConfig`. Throws {@link ConfigError} for invalid YAML, an unknown field, a wrong
 * type, or a bad value.
 *
 * @example
 * ```ts
 * parseKubeProxyConfiguration(
 *   "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n" +
 *     "kind: KubeProxyConfiguration\n" +
 *     "mode: nftables\n" +
 *     "clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n" +
 *     "nftables:\n  masqueradeAll: true\n  syncPeriod: 1m0s\n",
 *   { source: "kube-proxy.yaml" },
 * );
 * // { mode: "nft", clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
 * //   masqueradeAll: true, syncPeriodMs: 60000 }
 * ```
 */
export function parseKubeProxyConfiguration(
  text: string,
  options: ParseKubeProxyConfigurationOptions = {},
): Partial<Config> {
  const where = options.source === undefined ? "config" : `config ${options.source}`;
  const issues: StrictnessIssues = [];
  const document = loadYaml(text, where, issues);
  let result: Partial<Config>;
  if (isMapping(document) && document.kind === "ConfigMap") {
    const inner = configMapPayload(document, where);
    const innerDocument = loadYaml(inner.text, inner.where, issues);
    result = readKubeProxyConfiguration(innerDocument, inner.where, issues, options);
  } else {
    result = readKubeProxyConfiguration(document, where, issues, options);
  }
  if (issues.length > 0) {
    // Upstream's words (cmd/kube-proxy/app/options.go), then what the strict decoder refused.
    options.onWarning?.(
      `${where}: using lenient decoding as strict decoding failed: ${issues.join(", ")}`,
    );
  }
  return result;
}

/** Options of {@link toKubeProxyConfiguration}. */
export interface ToKubeProxyConfigurationOptions {
  /**
   * The `hostnameOverride` to write. Pass `""` for a file meant for every node (the name then
   * comes from `--hostname-override`, `NODE_NAME` or the host name). Default: `config.hostname`.
   */
  hostnameOverride?: string;
}

/**
 * Writes `config` as a `KubeProxyConfiguration` (`--write-config-to`) that both kube-proxy and
 * {@link parseKubeProxyConfiguration} read back to the same values.
 *
 * Both the `iptables:` and the `nftables:` sections carry the masquerade and sync settings, so
 * the file means the same whichever mode later reads it. What the format cannot say is noted in
 * comments at the top: flag-only settings (`--table-name`, `--master`, `--from-file`), a
 * minSyncPeriod of 0 and disabled servers (upstream reads `0s` and `""` as "use the default").
 * `detectLocalMode: None` is written as `ClusterCIDR` with an empty `clusterCIDR`, which means
 * the same upstream: no local-traffic detection.
 *
 * @example
 * ```ts
 * const yaml = toKubeProxyConfiguration({ ...DEFAULT_CONFIG, hostname: "node-1" });
 * parseKubeProxyConfiguration(yaml).hostname; // "node-1"
 * ```
 */
export function toKubeProxyConfiguration(
  config: Config,
  options: ToKubeProxyConfigurationOptions = {},
): string {
  const section = {
    masqueradeAll: config.masqueradeAll,
    masqueradeBit: config.masqueradeBit,
    minSyncPeriod: formatGoDuration(config.minSyncPeriodMs),
    syncPeriod: formatGoDuration(config.syncPeriodMs),
  };
  const noDetector = config.detectLocalMode === "None";
  const document = {
    apiVersion: KUBE_PROXY_API_VERSION,
    kind: "KubeProxyConfiguration",
    bindAddress: config.bindAddress === "" ? "0.0.0.0" : config.bindAddress,
    bindAddressHardFail: config.bindAddressHardFail,
    clientConnection: {
      burst: config.kubeApiBurst,
      kubeconfig: config.kubeconfig,
      qps: config.kubeApiQps,
    },
    clusterCIDR: noDetector ? "" : config.clusterCIDRs.join(","),
    conntrack: {
      maxPerCore: config.conntrackMaxPerCore,
      min: config.conntrackMin,
      tcpBeLiberal: config.conntrackTCPBeLiberal,
      tcpCloseWaitTimeout: formatGoDuration(config.conntrackTCPCloseWaitTimeoutMs),
      tcpEstablishedTimeout: formatGoDuration(config.conntrackTCPEstablishedTimeoutMs),
      udpStreamTimeout: formatGoDuration(config.conntrackUDPStreamTimeoutMs),
      udpTimeout: formatGoDuration(config.conntrackUDPTimeoutMs),
    },
    detectLocal: {
      bridgeInterface: config.bridgeInterface,
      interfaceNamePrefix: config.interfaceNamePrefix,
    },
    detectLocalMode: noDetector ? "ClusterCIDR" : config.detectLocalMode,
    healthzBindAddress: config.healthzBindAddress,
    hostnameOverride: options.hostnameOverride ?? config.hostname,
    iptables: section,
    logging: { format: config.loggingFormat, verbosity: config.verbosity },
    metricsBindAddress: config.metricsBindAddress,
    mode: config.mode === "nft" ? "nftables" : "iptables",
    nftables: section,
    nodePortAddresses: config.nodePortAddresses.length === 0 ? null : config.nodePortAddresses,
    oomScoreAdj: config.oomScoreAdj,
  };
  const notes = ["Written by kube-nftproxy --write-config-to; kube-proxy reads it as well."];
  const flagOnly = [
    ["--table-name", config.tableName !== DEFAULT_CONFIG.tableName, config.tableName],
    [
      "--iptables-backend",
      config.iptablesBackend !== DEFAULT_CONFIG.iptablesBackend,
      config.iptablesBackend,
    ],
    ["--master", config.master !== "", config.master],
    ["--scheduler", config.scheduler !== DEFAULT_CONFIG.scheduler, config.scheduler],
    ["--from-file", config.fromFile !== "", config.fromFile],
    ...(["maxClusterFileBytes", "maxListBytes", "maxWatchEventBytes"] as const).map((key) =>
      [describeField(key, config.mode), config[key] !== DEFAULT_CONFIG[key], config[key]] as const
    ),
  ].filter(([, differs]) => differs).map(([flag, , value]) => `${flag}=${value}`);
  if (flagOnly.length > 0) notes.push(`Not expressible here, pass as flags: ${flagOnly.join(" ")}`);
  if (config.minSyncPeriodMs === 0) {
    notes.push("minSyncPeriod 0 is read as the default (1s); pass --*-min-sync-period=0.");
  }
  for (
    const [name, value] of [["healthz", config.healthzBindAddress], [
      "metrics",
      config.metricsBindAddress,
    ]]
  ) {
    if (value === "") notes.push(`The ${name} server is disabled; "" is read as the default.`);
  }
  const header = notes.map((note) => `# ${note}\n`).join("");
  return header + dump(document, { lineWidth: -1, noRefs: true, quoteStyle: "double" });
}

function readKubeProxyConfiguration(
  document: unknown,
  where: string,
  issues: StrictnessIssues,
  options: ParseKubeProxyConfigurationOptions,
): Partial<Config> {
  if (!isMapping(document)) {
    const got = document === null || document === undefined
      ? "an empty document"
      : Array.isArray(document)
      ? "a list"
      : `${typeof document} ${JSON.stringify(document)}`;
    throw new ConfigError(
      `${where}: must be a KubeProxyConfiguration (a YAML mapping), got ${got}`,
    );
  }
  const top = new Fields(document, where, "", issues);
  if (document.apiVersion !== KUBE_PROXY_API_VERSION) {
    top.fail("apiVersion", `must be ${KUBE_PROXY_API_VERSION}`);
  }
  if (document.kind !== "KubeProxyConfiguration") {
    top.fail(
      "kind",
      "must be KubeProxyConfiguration " +
        `(or a ConfigMap holding one under data["${KUBEADM_CONFIG_KEY}"])`,
    );
  }
  top.noteUnknown(TOP_LEVEL_FIELDS);
  for (const key of IGNORED_MAPPING_FIELDS) top.section(key);

  const result: Partial<Config> = {};
  const fileMode = parseUpstreamProxyMode(top.string("mode"), top.name("mode"));
  if (fileMode !== undefined) result.mode = fileMode;

  const hostname = normalizeHostname(top.string("hostnameOverride"));
  if (hostname !== "") result.hostname = hostname;

  const bindAddress = top.string("bindAddress");
  if (bindAddress !== "") {
    const rule = checkBindAddress(bindAddress);
    if (rule !== undefined) top.fail("bindAddress", rule);
    if (!isUnspecifiedIP(bindAddress)) result.bindAddress = bindAddress;
  }
  // Upstream defaults the servers to IPv6 wildcards/loopback when bindAddress is IPv6.
  const ipv6 = bindAddress !== "" && ipFamily(bindAddress) === 6;
  const servers = [
    ["healthzBindAddress", DEFAULT_PORTS.healthz, "[::]"],
    ["metricsBindAddress", DEFAULT_PORTS.metrics, "[::1]"],
  ] as const;
  for (const [key, port, ipv6Host] of servers) {
    const raw = top.string(key);
    if (raw === "") {
      if (ipv6) result[key] = `${ipv6Host}:${port}`;
      continue;
    }
    const address = appendPortIfNeeded(raw, port);
    const rule = checkHostPort(address);
    if (rule !== undefined) top.fail(key, rule);
    result[key] = address;
  }

  const clusterCIDR = top.string("clusterCIDR");
  if (clusterCIDR !== "") {
    const cidrs = clusterCIDR.split(",");
    const rule = checkClusterCIDRs(cidrs);
    if (rule !== undefined) top.fail("clusterCIDR", rule);
    result.clusterCIDRs = cidrs;
  }

  const detectLocalMode = parseUpstreamDetectLocalMode(
    top.string("detectLocalMode"),
    top.name("detectLocalMode"),
  );
  if (detectLocalMode !== undefined) result.detectLocalMode = detectLocalMode;
  const detectLocal = top.section("detectLocal");
  detectLocal.noteUnknown(SECTION_FIELDS.detectLocal);
  const bridgeInterface = detectLocal.string("bridgeInterface");
  if (bridgeInterface !== "") result.bridgeInterface = bridgeInterface;
  const interfaceNamePrefix = detectLocal.string("interfaceNamePrefix");
  if (interfaceNamePrefix !== "") result.interfaceNamePrefix = interfaceNamePrefix;

  const nodePortAddresses = top.strings("nodePortAddresses");
  const badEntry = checkNodePortAddresses(nodePortAddresses);
  if (badEntry !== undefined) {
    throw invalidValue(
      `${top.name("nodePortAddresses")}[${badEntry.index}]`,
      nodePortAddresses[badEntry.index],
      { rule: badEntry.rule },
    );
  }
  if (nodePortAddresses.length > 0) result.nodePortAddresses = nodePortAddresses;

  // The section upstream reads: that of the mode given, "" being iptables (its default).
  const modeGiven = options.mode ?? top.string("mode");
  const section: UpstreamSection = modeGiven === "nft" || modeGiven === "nftables"
    ? "nftables"
    : modeGiven === "ipvs"
    ? "ipvs"
    : "iptables";
  options.onSection?.(section);
  Object.assign(
    result,
    readBackendSections(top, section, {
      why: options.mode !== undefined
        ? `the mode is ${options.mode}, set by flag, so the ${section} section applies`
        : top.string("mode") === ""
        ? 'mode is "", which kube-proxy reads as iptables, so the iptables section applies ' +
          "(the proxy itself runs in nft mode)"
        : `mode is ${top.string("mode")}, so the ${section} section applies`,
      where,
      warn: options.onWarning ?? (() => {}),
    }),
  );
  const ipvs = readIpvsSettings(readIpvsSection(top.section("ipvs")), {
    inUse: section === "ipvs",
    from: "file",
    where,
    whyNot: options.mode !== undefined
      ? `the mode is ${options.mode}, set by flag, so the ipvs section does not apply`
      : `mode is ${JSON.stringify(top.string("mode"))}, so the ipvs section does not apply`,
  });
  Object.assign(result, ipvs.config);
  if (ipvs.warning !== undefined) (options.onWarning ?? (() => {}))(ipvs.warning);

  const clientConnection = top.section("clientConnection");
  clientConnection.noteUnknown(SECTION_FIELDS.clientConnection);
  const kubeconfig = clientConnection.string("kubeconfig");
  if (kubeconfig !== "") result.kubeconfig = kubeconfig;
  // Zero is unset: upstream's defaulting makes it 5 and 10.
  const qps = clientConnection.number("qps");
  if (qps !== 0) result.kubeApiQps = qps;
  const burst = clientConnection.integer("burst");
  if (burst !== undefined && burst !== 0) {
    const rule = checkBurst(burst);
    if (rule !== undefined) clientConnection.fail("burst", rule);
    result.kubeApiBurst = burst;
  }

  Object.assign(result, readConntrack(top.section("conntrack")));

  const logging = top.section("logging");
  logging.noteUnknown(SECTION_FIELDS.logging);
  const verbosity = logging.integer("verbosity");
  if (verbosity !== undefined) {
    const rule = checkVerbosity(verbosity);
    if (rule !== undefined) logging.fail("verbosity", rule);
    if (verbosity > 0) result.verbosity = verbosity;
  }
  const format = logging.string("format");
  if (format !== "") {
    const rule = checkLoggingFormat(format);
    if (rule !== undefined) logging.fail("format", rule);
    result.loggingFormat = format as LoggingFormat;
  }

  if (top.boolean("bindAddressHardFail")) result.bindAddressHardFail = true;
  const oomScoreAdj = top.integer("oomScoreAdj");
  if (oomScoreAdj !== undefined) {
    const rule = checkOomScoreAdj(oomScoreAdj);
    if (rule !== undefined) top.fail("oomScoreAdj", rule);
    result.oomScoreAdj = oomScoreAdj;
  }

  const unused = unusedFields(top);
  if (unused.length > 0) {
    options.onWarning?.(
      `${where}: ignoring fields that have no effect in kube-nftproxy: ${unused.join("; ")}`,
    );
  }
  return result;
}

/** The `conntrack:` section: table size and timeouts the proxy sets in the kernel. */
function readConntrack(section: Fields): Partial<Config> {
  section.noteUnknown(SECTION_FIELDS.conntrack);
  const result: Partial<Config> = {};
  const counts = [["maxPerCore", "conntrackMaxPerCore"], ["min", "conntrackMin"]] as const;
  for (const [key, field] of counts) {
    const value = section.integer(key);
    if (value === undefined) continue;
    const rule = checkConntrackCount(value);
    if (rule !== undefined) section.fail(key, rule);
    result[field] = value;
  }
  const timeouts = [
    ["tcpEstablishedTimeout", "conntrackTCPEstablishedTimeoutMs", true],
    ["tcpCloseWaitTimeout", "conntrackTCPCloseWaitTimeoutMs", true],
    ["udpTimeout", "conntrackUDPTimeoutMs", false],
    ["udpStreamTimeout", "conntrackUDPStreamTimeoutMs", false],
  ] as const;
  for (const [key, field, pointer] of timeouts) {
    // Pointers upstream: null is the default, 0s is 0. Plain durations: 0s is unset (and the
    // default is 0 anyway).
    const ms = pointer ? section.optionalDuration(key) : section.duration(key) || undefined;
    if (ms === undefined) continue;
    const rule = checkConntrackTimeout(ms);
    if (rule !== undefined) section.fail(key, rule);
    result[field] = ms;
  }
  if (section.boolean("tcpBeLiberal")) result.conntrackTCPBeLiberal = true;
  return result;
}

/**
 * The masquerade and sync settings from the section in use (`iptables:` or `nftables:`, as
 * upstream's v1alpha1 conversion picks it by mode). Both sections are type-checked; values are
 * validated as upstream does: `iptables.masqueradeBit` always, the rest only in the section in
 * use. A non-default value in the other section is reported to `context.warn`, saying why it is
 * ignored.
 */
function readBackendSections(
  top: Fields,
  inUse: UpstreamSection,
  context: { why: string; where: string; warn: (line: string) => void },
): Partial<Config> {
  const result: Partial<Config> = {};
  for (const name of ["iptables", "nftables"] as const) {
    const section = top.section(name);
    section.noteUnknown(SECTION_FIELDS[name]);
    const masqueradeAll = section.boolean("masqueradeAll");
    const masqueradeBit = section.integer("masqueradeBit");
    const syncPeriodMs = section.duration("syncPeriod");
    const minSyncPeriodMs = section.duration("minSyncPeriod");
    if (name === "iptables") {
      section.boolean("localhostNodePorts");
      section.boolean("snatNodeInternalIP");
    }
    if (masqueradeBit !== undefined && (name === inUse || name === "iptables")) {
      const rule = checkMasqueradeBit(masqueradeBit);
      if (rule !== undefined) section.fail("masqueradeBit", rule);
    }
    // ipvs mode masquerades as iptables mode says (upstream's ipvs proxier reads those two).
    const masqueradeInUse = name === inUse || (inUse === "ipvs" && name === "iptables");
    if (name !== inUse) {
      const ignored = [
        masqueradeAll && !masqueradeInUse ? ["masqueradeAll", "true"] : [],
        masqueradeBit !== undefined && !masqueradeInUse
          ? ["masqueradeBit", String(masqueradeBit)]
          : [],
        syncPeriodMs !== 0 ? ["syncPeriod", formatMs(syncPeriodMs)] : [],
        minSyncPeriodMs !== 0 ? ["minSyncPeriod", formatMs(minSyncPeriodMs)] : [],
      ].filter((pair) => pair.length > 0).map(([key, value]) => `${name}.${key} (${value})`);
      if (ignored.length > 0) {
        context.warn(
          `${context.where}: ignoring ${ignored.join(", ")}: ${context.why}`,
        );
      }
      if (masqueradeInUse) {
        if (masqueradeAll) result.masqueradeAll = true;
        if (masqueradeBit !== undefined) result.masqueradeBit = masqueradeBit;
      }
      continue;
    }
    // Zero durations are unset: upstream's defaulting turns them into 30s and 1s.
    if (syncPeriodMs !== 0) {
      const rule = checkSyncPeriod(syncPeriodMs);
      if (rule !== undefined) section.fail("syncPeriod", rule);
      result.syncPeriodMs = syncPeriodMs;
    }
    if (minSyncPeriodMs !== 0) {
      const rule = checkMinSyncPeriod(minSyncPeriodMs);
      if (rule !== undefined) section.fail("minSyncPeriod", rule);
      result.minSyncPeriodMs = minSyncPeriodMs;
    }
    if (masqueradeAll) result.masqueradeAll = true;
    if (masqueradeBit !== undefined) result.masqueradeBit = masqueradeBit;
  }
  return result;
}

/** The `ipvs:` section, type-checked; every field it sets (Go zero values are unset). */
function readIpvsSection(section: Fields): IpvsSettings {
  section.noteUnknown(IPVS_SECTION_FIELDS);
  const settings: IpvsSettings = {};
  const durations = [
    ["syncPeriod", "syncPeriodMs"],
    ["minSyncPeriod", "minSyncPeriodMs"],
    ["tcpTimeout", "tcpTimeoutMs"],
    ["tcpFinTimeout", "tcpFinTimeoutMs"],
    ["udpTimeout", "udpTimeoutMs"],
  ] as const;
  for (const [key, field] of durations) {
    const ms = section.duration(key);
    if (ms !== 0) settings[field] = ms;
  }
  const scheduler = section.string("scheduler");
  if (scheduler !== "") settings.scheduler = scheduler;
  const excludeCIDRs = section.strings("excludeCIDRs");
  if (excludeCIDRs.length > 0) settings.excludeCIDRs = excludeCIDRs;
  if (section.boolean("strictARP")) settings.strictARP = true;
  return settings;
}

function formatMs(ms: number): string {
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}
