/**
 * The proxy daemon as the daemon benchmark runs it: `main.ts` started the way a node starts it
 * (`ip netns exec NS deno run -A main.ts …`, the Deno binary resolved outside the namespace),
 * inside a fresh pod cgroup, its log lines stamped as they arrive, and the moment its first
 * transaction reached the kernel seen from outside (the table appearing in `nft list tables`).
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { commandLine, run } from "../tests/netns/netns.ts";
import { parsePhaseLine, parseSyncLine, type SyncLine } from "./daemon_log.ts";
import type { PodCgroup } from "./pod_meter.ts";
import { DENO_ENV } from "./probe_runner.ts";

const MAIN = fileURLToPath(new URL("../main.ts", import.meta.url));

/** A sync line with the time the benchmark read it (`performance.now()`). */
export interface StampedSync extends SyncLine {
  readonly at: number;
}

/** Lines of the daemon's log kept for an error message. */
const KEPT_LINES = 200;

/** A daemon started by {@link startDaemon}. */
export interface MeteredDaemon {
  /** The daemon's own PID (Deno's: bash and `ip netns exec` exec it). */
  readonly pid: number;
  /** `performance.now()` just before the process was spawned. */
  readonly startedAt: number;
  /** Every sync it logged so far, oldest first. */
  readonly syncs: readonly StampedSync[];
  /** The phases of its `first sync timing:` line, once logged. */
  phases(): Record<string, number> | undefined;
  /** The last lines of its log. */
  tail(): string;
  /** Whether it has exited. */
  exited(): boolean;
  /** Waits for the first sync logged after `after`; throws after `timeoutMs` or on exit. */
  waitForSync(after: number, timeoutMs: number): Promise<StampedSync>;
  /** SIGTERM, then SIGKILL after `graceMs` (default 5000); resolves when it has ended. */
  stop(graceMs?: number): Promise<void>;
}

/**
 * Extra flags for the daemon's `deno run`, from the environment (e.g.
 * `BENCH_DENO_FLAGS="--cpu-prof --cpu-prof-dir=/tmp/prof"` to profile the daemon); none by
 * default, so figures are of the daemon as a node runs it.
 */
const EXTRA_DENO_FLAGS = (Deno.env.get("BENCH_DENO_FLAGS") ?? "").split(/\s+/).filter(Boolean);

/**
 * Starts `deno run --cached-only PERMISSIONS main.ts ARGS` in namespace `ns` inside `pod`'s
 * cgroup and checks that the PID it got is the Deno process itself. `permissions` are Deno's
 * permission flags, `-A` unless given (the image's set: {@link imagePermissions}).
 */
export async function startDaemon(
  ns: string,
  args: readonly string[],
  pod: PodCgroup,
  permissions: readonly string[] = ["-A"],
): Promise<MeteredDaemon> {
  const deno = Deno.realPathSync(Deno.execPath());
  const cmd = commandLine(
    [deno, "run", "--cached-only", ...EXTRA_DENO_FLAGS, ...permissions, MAIN, ...args],
    ns,
  );
  const startedAt = performance.now();
  const child = new Deno.Command("bash", {
    args: pod.wrap(cmd),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: { ...DENO_ENV },
  }).spawn();
  const syncs: StampedSync[] = [];
  const kept: string[] = [];
  let phases: Record<string, number> | undefined;
  const listeners = new Set<() => void>();
  let ended = false;
  const onLine = (line: string) => {
    const at = performance.now();
    kept.push(line);
    if (kept.length > KEPT_LINES) kept.shift();
    const sync = parseSyncLine(line);
    if (sync !== undefined) syncs.push({ ...sync, at });
    phases ??= parsePhaseLine(line);
    for (const listener of listeners) listener();
  };
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    let partial = "";
    for await (const text of stream.pipeThrough(new TextDecoderStream())) {
      const lines = (partial + text).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) onLine(line);
    }
    if (partial !== "") onLine(partial);
  };
  const pumps = Promise.all([pump(child.stdout), pump(child.stderr)]).catch(() => {});
  const status = child.status.then(async (s) => {
    await pumps;
    ended = true;
    for (const listener of listeners) listener();
    return s;
  });

  const daemon: MeteredDaemon = {
    pid: child.pid,
    startedAt,
    syncs,
    phases: () => phases,
    tail: () => kept.join("\n"),
    exited: () => ended,
    waitForSync(after, timeoutMs) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const found = syncs.find((s) => s.at > after);
          if (found !== undefined) {
            done();
            resolve(found);
          } else if (ended) {
            done();
            reject(new Error(`the daemon exited before syncing; its log:\n${daemon.tail()}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(`the daemon logged no sync in ${timeoutMs} ms; its log:\n${daemon.tail()}`),
          );
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
    async stop(graceMs = 5000) {
      if (!ended) {
        try {
          child.kill("SIGTERM");
        } catch {
          // Already gone.
        }
      }
      const killer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch {
          // Already gone.
        }
      }, graceMs);
      await status;
      clearTimeout(killer);
    },
  };
  try {
    await expectExe(child.pid, deno, () => ended);
  } catch (err) {
    await daemon.stop(0);
    throw err;
  }
  return daemon;
}

/** Waits (≤ 5 s) until PID `pid` runs `exe`: bash and `ip netns exec` replace themselves. */
async function expectExe(pid: number, exe: string, ended: () => boolean): Promise<void> {
  const deadline = performance.now() + 5000;
  let seen = "";
  while (performance.now() < deadline && !ended()) {
    try {
      seen = await Deno.readLink(`/proc/${pid}/exe`);
    } catch {
      seen = "(gone)";
    }
    if (seen === exe) return;
    await sleep(2);
  }
  throw new Error(`PID ${pid} runs ${seen}, not ${exe}: cannot meter the daemon by its PID`);
}

/** Options of {@link waitForTable}. */
export interface WaitForTableOptions {
  /** Table to wait for. Default `ip kube-nftproxy`. */
  table?: string;
  /** Pause between two listings, ms. Default 15. */
  intervalMs?: number;
  /** Give up after this long, ms. */
  timeoutMs: number;
  /** Stop early (with an error) when this returns true, e.g. the daemon exited. */
  abandon?: () => boolean;
}

/**
 * Polls `nft list tables` (cheap: no elements) in `ns` until `table` exists and returns the
 * `performance.now()` of the listing that first showed it. A proxy's first transaction creates
 * its table atomically with everything else, so this is when that transaction was committed
 * (to within one listing).
 */
export async function waitForTable(ns: string, options: WaitForTableOptions): Promise<number> {
  const table = `table ${options.table ?? "ip kube-nftproxy"}`;
  const interval = options.intervalMs ?? 15;
  const deadline = performance.now() + options.timeoutMs;
  const maxPolls = Math.ceil(options.timeoutMs / interval) + 1;
  for (let poll = 0; poll < maxPolls && performance.now() < deadline; poll++) {
    const r = await run(["nft", "list", "tables"], { ns, timeoutMs: 10_000 });
    const at = performance.now();
    if (r.code === 0 && r.stdout.split("\n").some((line) => line.trim() === table)) return at;
    if (options.abandon?.()) throw new Error(`gave up waiting for ${table} in ${ns}`);
    await sleep(interval);
  }
  throw new Error(`no ${table} in ${ns} after ${options.timeoutMs} ms`);
}

/**
 * The Deno permissions the container image runs the proxy with (`scripts/image_build.sh
 * permissions`), plus reading `readable` (a cluster file's directory) and `src/`: the image's
 * cluster file parser is one bundled module in a directory it may read, the source's worker
 * loads its imports from all over `src/` (without that the parse falls back to the main thread).
 */
export async function imagePermissions(readable: readonly string[] = []): Promise<string[]> {
  const script = new URL("../scripts/image_build.sh", import.meta.url).pathname;
  const out = await new Deno.Command("sh", { args: [script, "permissions"], stdout: "piped" })
    .output();
  if (!out.success) throw new Error(`sh ${script} permissions failed`);
  const flags = new TextDecoder().decode(out.stdout).trim().split(/\s+/);
  const worker = new URL("../src/", import.meta.url).pathname;
  return [...flags, `--allow-read=${[worker, ...readable].join(",")}`];
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}
