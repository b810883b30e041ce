/**
 * The kernel's connection-tracking settings the proxy makes at start-up, as kube-proxy does
 * (`conntrack:` in its configuration): the table size (`nf_conntrack_max`, and the hash size
 * when it is below a quarter of that) and the TCP/UDP timeouts. A value already in place is not
 * written; 0 (or false) leaves a setting alone.
 *
 * Unlike kube-proxy, a setting the kernel refuses is a warning, not a failed start:
 * `nf_conntrack_max` and the hash size can only be changed from the host's initial network
 * namespace (a proxy in a container with its own namespace, or in a test namespace, cannot),
 * and services work without them. The timeouts belong to the network namespace the proxy runs
 * in.
 *
 * @module
 */
import type { Config } from "../config/config.ts";

/** Where the settings live. */
export const NETFILTER_SYSCTLS = "/proc/sys/net/netfilter";
/** The conntrack hash table size (global, host namespace only). */
export const CONNTRACK_HASHSIZE = "/sys/module/nf_conntrack/parameters/hashsize";

/** One setting the configuration asks for. */
export interface ConntrackSetting {
  /** The file: `/proc/sys/net/netfilter/nf_conntrack_max`, …. */
  readonly path: string;
  readonly value: number;
}

/** Reads and writes the settings' files; injectable for tests. */
export interface SysctlFiles {
  read(path: string): Promise<string>;
  write(path: string, value: string): Promise<void>;
}

/**
 * The settings `config` asks for on a machine with `cpus` CPUs (pure): `nf_conntrack_max` as
 * `maxPerCore × cpus`, at least `min` (none when maxPerCore is 0), then each non-zero timeout
 * in seconds, and `nf_conntrack_tcp_be_liberal` 1 when asked.
 *
 * @example
 * ```ts
 * conntrackSettings(DEFAULT_CONFIG, 2)[0]; // { path: ".../nf_conntrack_max", value: 131072 }
 * ```
 */
export function conntrackSettings(config: Config, cpus: number): ConntrackSetting[] {
  const out: ConntrackSetting[] = [];
  const add = (name: string, value: number) =>
    out.push({ path: `${NETFILTER_SYSCTLS}/${name}`, value });
  if (config.conntrackMaxPerCore > 0) {
    add("nf_conntrack_max", Math.max(config.conntrackMaxPerCore * cpus, config.conntrackMin));
  }
  const timeouts = [
    ["nf_conntrack_tcp_timeout_established", config.conntrackTCPEstablishedTimeoutMs],
    ["nf_conntrack_tcp_timeout_close_wait", config.conntrackTCPCloseWaitTimeoutMs],
    ["nf_conntrack_udp_timeout", config.conntrackUDPTimeoutMs],
    ["nf_conntrack_udp_timeout_stream", config.conntrackUDPStreamTimeoutMs],
  ] as const;
  for (const [name, ms] of timeouts) if (ms > 0) add(name, Math.round(ms / 1000));
  if (config.conntrackTCPBeLiberal) add("nf_conntrack_tcp_be_liberal", 1);
  return out;
}

/** What {@link applyConntrackSettings} did. */
export interface ConntrackReport {
  /** `name: before → after`, one per setting written. */
  readonly changed: readonly string[];
  /** One sentence per setting the kernel refused (or that could not be read). */
  readonly refused: readonly string[];
}

/**
 * Writes each setting whose current value differs, then raises the hash size to a quarter of
 * `nf_conntrack_max` if it is smaller (as kube-proxy does). Never throws: what fails is
 * reported in {@link ConntrackReport.refused}.
 */
export async function applyConntrackSettings(
  settings: readonly ConntrackSetting[],
  files: SysctlFiles = denoSysctlFiles,
): Promise<ConntrackReport> {
  const changed: string[] = [];
  const refused: string[] = [];
  const set = async (path: string, value: number): Promise<boolean> => {
    const name = path.slice(path.lastIndexOf("/") + 1);
    let before: number;
    try {
      before = Number((await files.read(path)).trim());
    } catch (err) {
      refused.push(`cannot read ${name} (${(err as Error).message})`);
      return false;
    }
    if (before === value) return true;
    try {
      await files.write(path, String(value));
      changed.push(`${name}: ${before} → ${value}`);
      return true;
    } catch (err) {
      refused.push(
        `cannot set ${name} to ${value}, it stays ${before} (${(err as Error).message})`,
      );
      return false;
    }
  };
  for (const { path, value } of settings) {
    const ok = await set(path, value);
    if (!ok || !path.endsWith("/nf_conntrack_max")) continue;
    try {
      const hashsize = Number((await files.read(CONNTRACK_HASHSIZE)).trim());
      if (hashsize < Math.floor(value / 4)) await set(CONNTRACK_HASHSIZE, Math.floor(value / 4));
    } catch (err) {
      refused.push(`cannot read the conntrack hash size (${(err as Error).message})`);
    }
  }
  return { changed, refused };
}

/** The real files. */
export const denoSysctlFiles: SysctlFiles = {
  read: (path) => Deno.readTextFile(path),
  write: (path, value) => Deno.writeTextFile(path, value),
};
