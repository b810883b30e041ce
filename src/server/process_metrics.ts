/**
 * The process metrics the standard kube-proxy dashboard plots, read from /proc as Go's process
 * collector reads them (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
 * `process_virtual_memory_bytes`, `process_start_time_seconds`), and `kubernetes_build_info`.
 *
 * prom-client's defaults are not used: they add Node's own metrics (heap, event loop,
 * `nodejs_version_info`), not Go's, and derive the start time from the uptime. /proc counts
 * every thread of the process, as for a Go binary.
 *
 * Where /proc cannot be read (Deno asks `--allow-all` for any file there, which the container
 * image does not give), the dashboard's two still come from the kernel: the CPU time from
 * `getrusage` (`process.cpuUsage()`: every thread of the process in Deno 2.9.6, equal to /proc's
 * count with a worker and the garbage collector busy, checked), the resident memory from
 * `Deno.memoryUsage()`, and the start from the runtime's time origin (a few ms after exec).
 * Only the virtual memory size is then absent.
 *
 * @example
 * ```ts
 * registerProcessMetrics(registry);
 * parseProcStat("1234 (deno) S 1 … 37 12 …", 1795640000);
 * // { cpuSeconds: 0.49, startTimeSeconds: …, virtualBytes: … }
 * ```
 *
 * @module
 */
import process from "node:process";
import { Counter, Gauge, type Registry } from "prom-client";
import { VERSION } from "../version.ts";

/** Clock ticks per second of /proc's times: `USER_HZ`, 100 on every Linux (Go's procfs assumes it). */
const USER_HZ = 100;

/** What {@link parseProcStat} reads from `/proc/self/stat`. */
export interface ProcStat {
  /** User plus system time of every thread, in seconds. */
  readonly cpuSeconds: number;
  /** When the process started, in Unix seconds (needs the boot time). */
  readonly startTimeSeconds: number;
  /** Virtual memory size in bytes. */
  readonly virtualBytes: number;
}

/**
 * Reads `/proc/<pid>/stat` text: utime and stime (fields 14, 15), starttime (22, ticks after
 * boot) and vsize (23); `bootTimeSeconds` is `/proc/stat`'s `btime`. Undefined when malformed.
 */
export function parseProcStat(text: string, bootTimeSeconds: number): ProcStat | undefined {
  // The command name (field 2) is in parentheses and may hold spaces or ')'.
  const end = text.lastIndexOf(")");
  if (end < 0) return undefined;
  const fields = text.slice(end + 2).trim().split(/\s+/); // fields[0] is field 3
  const field = (n: number) => Number(fields[n - 3]);
  const [utime, stime, start, vsize] = [field(14), field(15), field(22), field(23)];
  if (![utime, stime, start, vsize].every(Number.isFinite)) return undefined;
  return {
    cpuSeconds: (utime + stime) / USER_HZ,
    startTimeSeconds: bootTimeSeconds + start / USER_HZ,
    virtualBytes: vsize,
  };
}

/** `btime` of `/proc/stat` text: when the system booted, in Unix seconds. */
export function parseBootTime(text: string): number | undefined {
  const match = /^btime\s+(\d+)$/m.exec(text);
  return match === null ? undefined : Number(match[1]);
}

/** `VmRSS` of `/proc/<pid>/status` text, in bytes. */
export function parseResidentBytes(text: string): number | undefined {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(text);
  return match === null ? undefined : Number(match[1]) * 1024;
}

/** User and system CPU time of every thread of the process, from `getrusage`. */
function rusageCpuSeconds(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1e6;
}

function readText(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

/**
 * Registers the process metrics (read at each scrape; from the runtime where /proc cannot be
 * read, the virtual size then absent) and `kubernetes_build_info` on `registry`.
 */
export function registerProcessMetrics(registry: Registry): void {
  const registers = [registry];
  const bootTime = parseBootTime(readText("/proc/stat") ?? "");
  const stat = () => {
    const text = readText("/proc/self/stat");
    return text === undefined || bootTime === undefined ? undefined : parseProcStat(text, bootTime);
  };
  new Counter({
    name: "process_cpu_seconds_total",
    help: "Total user and system CPU time spent in seconds.",
    registers,
    collect: function () {
      this.reset();
      this.inc(stat()?.cpuSeconds ?? rusageCpuSeconds());
    },
  });
  new Gauge({
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    registers,
    collect: function () {
      const text = readText("/proc/self/status");
      this.set(
        (text === undefined ? undefined : parseResidentBytes(text)) ?? Deno.memoryUsage().rss,
      );
    },
  });
  const atStart = stat();
  if (atStart !== undefined) {
    new Gauge({
      name: "process_virtual_memory_bytes",
      help: "Virtual memory size in bytes.",
      registers,
      collect: function () {
        const s = stat();
        if (s !== undefined) this.set(s.virtualBytes);
      },
    });
  }
  const started = atStart?.startTimeSeconds ?? (Date.now() - performance.now()) / 1000;
  new Gauge({
    name: "process_start_time_seconds",
    help: "Start time of the process since unix epoch in seconds.",
    registers,
    collect: function () {
      this.set(started);
    },
  });
  const [major, minor] = VERSION.split(".");
  new Gauge({
    name: "kubernetes_build_info",
    help:
      "A metric with a constant '1' value labeled by major, minor, git version, git commit, git tree state, build date, Go version, and compiler from which Kubernetes was built, and platform on which it is running.",
    labelNames: [
      "build_date",
      "compiler",
      "git_commit",
      "git_tree_state",
      "git_version",
      "go_version",
      "major",
      "minor",
      "platform",
    ] as const,
    registers,
  }).set({
    build_date: "",
    compiler: "deno",
    git_commit: "",
    git_tree_state: "",
    git_version: `v${VERSION}`,
    go_version: `deno${Deno.version.deno}`,
    major,
    minor,
    platform: `${Deno.build.os}/${Deno.build.arch === "x86_64" ? "amd64" : "arm64"}`,
  }, 1);
}
