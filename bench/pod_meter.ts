/**
 * What a kubelet sees of a pod, for the daemon benchmark: a fresh cgroup (cpuacct + memory on
 * cgroup v1, one group on v2) that holds a process and every program it starts, read for CPU
 * time and memory (children included, while they run — unlike `/proc/PID/stat`'s `cutime`, which
 * counts a child only once it is reaped); and one process's own figures from `/proc/PID`.
 *
 * The same method as `/work/shared/tools/podmeter`: the program is started through a fixed
 * `bash -c` wrapper that writes its own PID into the group's `cgroup.procs` and then execs the
 * program, so everything from the first instruction on is counted. The parsers are pure and
 * exported for tests; the rest reads and writes cgroupfs and `/proc`.
 *
 * @module
 */

/** A process's memory from `/proc/PID/status`, MiB. */
export interface ProcessMemory {
  /** Peak resident set size (`VmHWM`). */
  readonly peakRssMiB: number;
  /** Resident set size now (`VmRSS`). */
  readonly rssMiB: number;
}

/**
 * `VmHWM` and `VmRSS` of a `/proc/PID/status` text, in MiB.
 * Throws when either is missing (a kernel thread, or a process that already ended).
 *
 * @example
 * ```ts
 * parseProcStatus("VmHWM:\t  307200 kB\nVmRSS:\t  204800 kB\n"); // { peakRssMiB: 300, rssMiB: 200 }
 * ```
 */
export function parseProcStatus(text: string): ProcessMemory {
  const kb = (field: string) => {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text);
    if (m === null) throw new Error(`no ${field} in /proc/PID/status`);
    return Number(m[1]) / 1024;
  };
  return { peakRssMiB: kb("VmHWM"), rssMiB: kb("VmRSS") };
}

/**
 * User + system CPU seconds of one process (itself, not its children) from a `/proc/PID/stat`
 * text, given the clock ticks per second (`getconf CLK_TCK`, 100 on Linux).
 *
 * @example
 * ```ts
 * parseProcStatCpu("42 (deno) S 1 42 42 0 -1 4194560 1 0 0 0 150 50 0 0 20 0 9 0 1 1 1", 100); // 2
 * ```
 */
export function parseProcStatCpu(text: string, ticksPerSecond = 100): number {
  // The command name may hold spaces and parentheses: fields are counted after the last ")".
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) {
    throw new Error("cannot read utime and stime from /proc/PID/stat");
  }
  return (utime + stime) / ticksPerSecond;
}

/**
 * Resident and page-cache bytes of a cgroup v1 `memory.stat` (the `total_` figures, which
 * include child groups).
 *
 * @example
 * ```ts
 * parseMemoryStat("cache 10\nrss 20\ntotal_cache 4096\ntotal_rss 8192\n"); // { rss: 8192, cache: 4096 }
 * ```
 */
export function parseMemoryStat(text: string): { rss: number; cache: number } {
  const field = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(text)?.[1] ?? 0);
  return { rss: field("total_rss"), cache: field("total_cache") };
}

/** Memory of a whole pod (its cgroup), MiB. */
export interface PodMemory {
  /** What the group is charged now: resident memory plus page cache (what its limit counts). */
  readonly usageMiB: number;
  /** Resident (anonymous) memory alone now; undefined on cgroup v2. */
  readonly rssMiB?: number;
  /** The most the group was ever charged (`memory.max_usage_in_bytes` / `memory.peak`). */
  readonly peakMiB: number;
}

const MiB = 1024 * 1024;
const CGROUP_ROOT = "/sys/fs/cgroup";

/**
 * A fresh cgroup for one pod-like process tree. Create it with {@link PodCgroup.create}, start
 * the program through {@link PodCgroup.wrap}, and {@link PodCgroup.remove} it once every
 * process in it has ended.
 *
 * @example
 * ```ts
 * const pod = await PodCgroup.create("knp-bench-1a2b3c");
 * const child = new Deno.Command("bash", { args: pod.wrap(["sleep", "1"]) }).spawn();
 * await child.status;
 * (await pod.memory()).peakMiB;
 * await pod.remove();
 * ```
 */
export class PodCgroup {
  readonly #dirs: readonly string[];
  readonly #v1: boolean;

  private constructor(dirs: readonly string[], v1: boolean) {
    this.#dirs = dirs;
    this.#v1 = v1;
  }

  /**
   * Creates the group `name` (v1: under cpuacct's root and under this process's own memory
   * group, as podmeter does; v2: under this process's group).
   */
  static async create(name: string): Promise<PodCgroup> {
    if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name)) throw new Error(`cannot use cgroup name ${name}`);
    const own = await Deno.readTextFile("/proc/self/cgroup");
    const v1 = await isDirectory(`${CGROUP_ROOT}/cpuacct`) &&
      await isDirectory(`${CGROUP_ROOT}/memory`);
    let dirs: string[];
    if (v1) {
      const memory = /^\d+:memory:(.*)$/m.exec(own)?.[1] ?? "/";
      dirs = [
        `${CGROUP_ROOT}/cpuacct/${name}`,
        `${CGROUP_ROOT}/memory${memory.replace(/\/$/, "")}/${name}`,
      ];
    } else {
      const unified = /^0::(.*)$/m.exec(own)?.[1] ?? "/";
      dirs = [`${CGROUP_ROOT}${unified.replace(/\/$/, "")}/${name}`];
    }
    for (const dir of dirs) await Deno.mkdir(dir);
    return new PodCgroup(dirs, v1);
  }

  /**
   * The arguments of `bash` that put bash itself into the group and then exec `cmd` (no shell
   * parsing of `cmd`: it is passed as `"$@"`). The started process's PID is then `cmd`'s.
   */
  wrap(cmd: readonly string[]): string[] {
    const procs = this.#dirs.map((dir) => `${dir}/cgroup.procs`);
    return [
      "-c",
      'for f in "${@:2:$1}"; do echo $$ > "$f" || exit 125; done; shift $(($1 + 1)); exec "$@"',
      "pod-cgroup",
      String(procs.length),
      ...procs,
      ...cmd,
    ];
  }

  /** CPU seconds used by everything that ran in the group so far. */
  async cpuSeconds(): Promise<number> {
    if (this.#v1) return Number(await Deno.readTextFile(`${this.#dirs[0]}/cpuacct.usage`)) / 1e9;
    const stat = await Deno.readTextFile(`${this.#dirs[0]}/cpu.stat`);
    return Number(/^usage_usec (\d+)$/m.exec(stat)?.[1] ?? NaN) / 1e6;
  }

  /** The group's memory now and at its peak. */
  async memory(): Promise<PodMemory> {
    const dir = this.#dirs.at(-1)!;
    if (this.#v1) {
      const [usage, peak, stat] = await Promise.all([
        Deno.readTextFile(`${dir}/memory.usage_in_bytes`),
        Deno.readTextFile(`${dir}/memory.max_usage_in_bytes`),
        Deno.readTextFile(`${dir}/memory.stat`),
      ]);
      return {
        usageMiB: Number(usage) / MiB,
        rssMiB: parseMemoryStat(stat).rss / MiB,
        peakMiB: Number(peak) / MiB,
      };
    }
    const usage = await Deno.readTextFile(`${dir}/memory.current`);
    const peak = await Deno.readTextFile(`${dir}/memory.peak`).catch(() => "NaN");
    return { usageMiB: Number(usage) / MiB, peakMiB: Number(peak) / MiB };
  }

  /** Removes the group (retrying briefly while its last processes are being reaped). */
  async remove(): Promise<void> {
    for (const dir of this.#dirs) {
      for (let attempt = 0;; attempt++) {
        try {
          await Deno.remove(dir);
          break;
        } catch (err) {
          if (err instanceof Deno.errors.NotFound) break;
          if (attempt >= 25) throw err;
          await new Promise((r) => setTimeout(r, 200));
        }
      }
    }
  }
}

/**
 * Removes groups named `prefix…` that an earlier, killed benchmark left empty (a group with a
 * process in it cannot be removed and is left alone). Returns the removed paths.
 */
export async function removeStaleCgroups(prefix: string): Promise<string[]> {
  const own = await Deno.readTextFile("/proc/self/cgroup");
  const memory = /^\d+:memory:(.*)$/m.exec(own)?.[1]?.replace(/\/$/, "") ?? "";
  const unified = /^0::(.*)$/m.exec(own)?.[1]?.replace(/\/$/, "") ?? "";
  const parents = [
    `${CGROUP_ROOT}/cpuacct`,
    `${CGROUP_ROOT}/memory${memory}`,
    `${CGROUP_ROOT}${unified}`,
  ];
  const removed: string[] = [];
  for (const parent of parents) {
    let entries: Deno.DirEntry[];
    try {
      entries = [...Deno.readDirSync(parent)];
    } catch {
      continue;
    }
    for (const entry of entries) {
      if (!entry.isDirectory || !entry.name.startsWith(prefix)) continue;
      try {
        await Deno.remove(`${parent}/${entry.name}`);
        removed.push(`${parent}/${entry.name}`);
      } catch {
        // Still has processes (a live benchmark): not stale.
      }
    }
  }
  return removed;
}

/** One process's memory from `/proc/PID/status`. */
export async function processMemory(pid: number): Promise<ProcessMemory> {
  return parseProcStatus(await Deno.readTextFile(`/proc/${pid}/status`));
}

/** One process's own CPU seconds (not its children's) from `/proc/PID/stat`. */
export async function processCpuSeconds(pid: number): Promise<number> {
  return parseProcStatCpu(await Deno.readTextFile(`/proc/${pid}/stat`));
}

async function isDirectory(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isDirectory;
  } catch {
    return false;
  }
}

/** The machine's CPU time so far (`/proc/stat`'s first line): busy and total, in ticks. */
export function parseMachineCpu(text: string): { busy: number; total: number } {
  const fields = text.slice(0, text.indexOf("\n")).trim().split(/\s+/).slice(1).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already in user and nice).
  const total = fields.slice(0, 8).reduce((sum, n) => sum + n, 0);
  const idle = fields[3] + fields[4];
  return { busy: total - idle, total };
}

/** What {@link waitForQuietMachine} found. */
export interface QuietWait {
  /** How long it waited, ms. */
  waitedMs: number;
  /** The busy share of all CPUs in the last window (0–1). */
  busy: number;
}

/**
 * Waits until the machine's CPUs are at most `threshold` busy over a `windowMs` window (all
 * CPUs together), or `maxMs` has passed. For a benchmark's cold start: the kernel still tearing
 * down a namespace with a large ruleset (work queues, after the namespace's last process
 * ended) would otherwise take CPU from the daemon being measured.
 */
export async function waitForQuietMachine(
  options: { threshold?: number; windowMs?: number; maxMs?: number } = {},
): Promise<QuietWait> {
  const { threshold = 0.1, windowMs = 500, maxMs = 30_000 } = options;
  const started = performance.now();
  let before = parseMachineCpu(await Deno.readTextFile("/proc/stat"));
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, windowMs));
    const after = parseMachineCpu(await Deno.readTextFile("/proc/stat"));
    const total = after.total - before.total;
    const busy = total > 0 ? (after.busy - before.busy) / total : 0;
    const waitedMs = performance.now() - started;
    if (busy <= threshold || waitedMs >= maxMs) return { waitedMs, busy };
    before = after;
  }
}
