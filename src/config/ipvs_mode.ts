/**
 * kube-proxy's ipvs mode as this proxy reads it: `mode: ipvs` (or `--proxy-mode=ipvs`) runs the
 * nftables back end, the `ipvs:` section's and the `--ipvs-*` flags' sync periods and scheduler
 * carry over, and the settings with no nftables meaning (`strictARP`, `excludeCIDRs`, the IPVS
 * connection timeouts) are named in one warning at start, never dropped without a word. Also the
 * mapping of IPVS scheduler names onto {@link EndpointScheduler}.
 *
 * Pure: the callers (kubeproxy_config.ts for the file, flags.ts for the flags) read the values
 * and pass on the warning lines.
 *
 * @module
 */
import type { Config, EndpointScheduler } from "./config.ts";
import { invalidValue } from "./config_error.ts";
import { formatGoDuration } from "./duration.ts";
import { checkMinSyncPeriod, checkSyncPeriod } from "./validation.ts";

/** The fields of v1alpha1 `KubeProxyIPVSConfiguration` (the `ipvs:` section). */
export const IPVS_SECTION_FIELDS: ReadonlySet<string> = new Set([
  "syncPeriod",
  "minSyncPeriod",
  "scheduler",
  "excludeCIDRs",
  "strictARP",
  "tcpTimeout",
  "tcpFinTimeout",
  "udpTimeout",
]);

/**
 * The ipvs settings given (in the file's `ipvs:` section or as `--ipvs-*` flags); a field left
 * unset (absent, or Go's zero value) is undefined.
 */
export interface IpvsSettings {
  syncPeriodMs?: number;
  minSyncPeriodMs?: number;
  scheduler?: string;
  excludeCIDRs?: readonly string[];
  strictARP?: boolean;
  tcpTimeoutMs?: number;
  tcpFinTimeoutMs?: number;
  udpTimeoutMs?: number;
}

/** One ipvs setting: its file field, its flag, and whether nftables gives it a meaning. */
interface IpvsSetting {
  key: keyof IpvsSettings;
  field: string;
  flag: string;
  applies: boolean;
}

/** Every ipvs setting, in the order warnings name them. */
const IPVS_SETTINGS: readonly IpvsSetting[] = [
  { key: "syncPeriodMs", field: "syncPeriod", flag: "--ipvs-sync-period", applies: true },
  { key: "minSyncPeriodMs", field: "minSyncPeriod", flag: "--ipvs-min-sync-period", applies: true },
  { key: "scheduler", field: "scheduler", flag: "--ipvs-scheduler", applies: true },
  { key: "strictARP", field: "strictARP", flag: "--ipvs-strict-arp", applies: false },
  { key: "excludeCIDRs", field: "excludeCIDRs", flag: "--ipvs-exclude-cidrs", applies: false },
  { key: "tcpTimeoutMs", field: "tcpTimeout", flag: "--ipvs-tcp-timeout", applies: false },
  { key: "tcpFinTimeoutMs", field: "tcpFinTimeout", flag: "--ipvs-tcpfin-timeout", applies: false },
  { key: "udpTimeoutMs", field: "udpTimeout", flag: "--ipvs-udp-timeout", applies: false },
];

/** What an IPVS scheduler becomes here, and a note when the behaviour differs. */
export interface MappedScheduler {
  scheduler: EndpointScheduler;
  /** Why the choice differs from the IPVS scheduler's; absent when it is the same. */
  note?: string;
}

const BY_COUNT = "nftables cannot pick by connection count, so new connections go to a random " +
  "endpoint (upstream nftables mode's choice)";

/** IPVS scheduler names (`ipvsadm -s`) and what each becomes. */
const IPVS_SCHEDULERS: Readonly<Record<string, MappedScheduler>> = {
  rr: { scheduler: "round-robin" },
  wrr: { scheduler: "round-robin", note: "endpoint weights are all 1 in Kubernetes" },
  sh: { scheduler: "source-hash" },
  mh: {
    scheduler: "source-hash",
    note: "a plain hash of the client address, not Maglev: when the endpoint set changes most " +
      "clients move, where Maglev moves about 1/N of them",
  },
  lc: { scheduler: "random", note: BY_COUNT },
  wlc: { scheduler: "random", note: BY_COUNT },
  sed: { scheduler: "random", note: BY_COUNT },
  nq: { scheduler: "random", note: BY_COUNT },
  lblc: { scheduler: "random", note: BY_COUNT },
  lblcr: { scheduler: "random", note: BY_COUNT },
  dh: {
    scheduler: "random",
    note: "a hash of the destination would send every client of a service address to one " +
      "endpoint, so new connections go to a random endpoint",
  },
};

/**
 * The {@link EndpointScheduler} an IPVS scheduler name maps to; `""` is IPVS's default, `rr`.
 * Throws {@link ConfigError} naming `field` for a name IPVS does not have.
 *
 * @example
 * ```ts
 * mapIpvsScheduler("wlc", "flag --ipvs-scheduler").scheduler; // "random"
 * mapIpvsScheduler("", "config kube-proxy.yaml: ipvs.scheduler").scheduler; // "round-robin"
 * ```
 */
export function mapIpvsScheduler(name: string, field: string): MappedScheduler {
  const mapped = IPVS_SCHEDULERS[name === "" ? "rr" : name];
  if (mapped === undefined) {
    throw invalidValue(field, name, {
      rule: `must be an IPVS scheduler: ${Object.keys(IPVS_SCHEDULERS).join(", ")}`,
    });
  }
  return mapped;
}

/** Options of {@link readIpvsSettings}. */
export interface ReadIpvsSettingsOptions {
  /** The mode in use is ipvs, so the settings apply (else each one given is ignored). */
  inUse: boolean;
  /** Where the settings come from: the `ipvs:` section of a file, or the `--ipvs-*` flags. */
  from: "file" | "flags";
  /** Prefix of the warning, e.g. `config kube-proxy.yaml` or `command line`. */
  where: string;
  /** Why the settings do not apply, when `inUse` is false (e.g. `mode is nftables`). */
  whyNot?: string;
  /**
   * An unset scheduler means IPVS's default, `rr` (false: it is left to another source, e.g.
   * flags over a file's section). Default true.
   */
  defaultScheduler?: boolean;
}

/**
 * The {@link Config} fields the given ipvs settings set, and the one warning line saying what
 * applies and what does not. In ipvs mode the sync periods apply as they are and the scheduler
 * is mapped ({@link mapIpvsScheduler}; unset is IPVS's `rr`); `strictARP`, `excludeCIDRs`,
 * `tcpTimeout`, `tcpFinTimeout` and `udpTimeout` are named as ignored. Outside ipvs mode every
 * setting given is named as ignored, and nothing is set. Throws {@link ConfigError} for a sync
 * period out of range or an unknown scheduler.
 *
 * @example
 * ```ts
 * const { config, warning } = readIpvsSettings(
 *   { scheduler: "sh", strictARP: true },
 *   { inUse: true, from: "file", where: "config kube-proxy.yaml" },
 * );
 * // config: { scheduler: "source-hash" }
 * // warning: "config kube-proxy.yaml: mode ipvs runs kube-nftproxy's nftables back end …;
 * //   applied: ipvs.scheduler (sh → source-hash); ignored (no nftables meaning): ipvs.strictARP (true)"
 * ```
 */
export function readIpvsSettings(
  given: IpvsSettings,
  options: ReadIpvsSettingsOptions,
): { config: Partial<Config>; warning?: string } {
  const name = (setting: IpvsSetting) =>
    options.from === "file" ? `ipvs.${setting.field}` : setting.flag;
  const present = IPVS_SETTINGS.filter((s) => given[s.key] !== undefined);
  if (!options.inUse) {
    if (present.length === 0) return { config: {} };
    const list = present.map((s) => `${name(s)} (${showValue(given[s.key])})`).join(", ");
    return {
      config: {},
      warning: `${options.where}: ignoring ${list}: ${options.whyNot ?? "the mode is not ipvs"}`,
    };
  }
  const config: Partial<Config> = {};
  const applied: string[] = [];
  for (const setting of present.filter((s) => s.applies && s.key !== "scheduler")) {
    const ms = given[setting.key] as number;
    const rule = setting.key === "syncPeriodMs" ? checkSyncPeriod(ms) : checkMinSyncPeriod(ms);
    if (rule !== undefined) {
      throw invalidValue(`${options.where}: ${name(setting)}`, formatGoDuration(ms), { rule });
    }
    config[setting.key as "syncPeriodMs" | "minSyncPeriodMs"] = ms;
    applied.push(`${name(setting)} (${formatGoDuration(ms)})`);
  }
  const schedulerSetting = IPVS_SETTINGS.find((s) => s.key === "scheduler")!;
  const schedulerName = given.scheduler ?? "";
  if (schedulerName !== "" || (options.defaultScheduler ?? true)) {
    const mapped = mapIpvsScheduler(
      schedulerName,
      `${options.where}: ${name(schedulerSetting)}`,
    );
    config.scheduler = mapped.scheduler;
    applied.push(
      `${name(schedulerSetting)} (${
        schedulerName === "" ? "unset, IPVS's default rr" : schedulerName
      } → ${mapped.scheduler}${mapped.note === undefined ? "" : `: ${mapped.note}`})`,
    );
  }
  const ignored = present.filter((s) => !s.applies)
    .map((s) => `${name(s)} (${showValue(given[s.key])})`);
  const warning = `${options.where}: mode ipvs runs kube-nftproxy's nftables back end ` +
    `(ipvs mode is deprecated upstream; see docs/operating.md, "Switching from ipvs mode"); ` +
    `applied: ${applied.length === 0 ? "none" : applied.join(", ")}; ` +
    `ignored (no nftables meaning): ${ignored.length === 0 ? "none" : ignored.join(", ")}`;
  return { config, warning };
}

/** A setting's value as a warning shows it: durations as Go writes them, lists comma-joined. */
function showValue(value: IpvsSettings[keyof IpvsSettings]): string {
  if (typeof value === "number") return formatGoDuration(value);
  if (Array.isArray(value)) return value.join(",");
  return String(value);
}
