/**
 * The proxy daemon as the daemon benchmark runs it: `main.ts` started the way a node starts it
 * (`ip netns exec NS deno run -A main.ts …`, the Deno binary resolved outside the namespace),
 * inside a fresh pod cgroup, its log lines stamped as they arrive, and the moment its first
 * transaction reached the kernel seen from outside (the table appearing in `nft list tables`).
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { commandLine } from "../tests/netns/netns.ts";
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

/** A running {@link startTableWatch}. */
export interface TableWatch {
  /**
   * The `performance.now()` when the table was first seen (within ~3 ms of its commit); rejects
   * after the watch's time limit, or when `abandon` returns true while waiting.
   */
  found(abandon?: () => boolean): Promise<number>;
  /** Ends the watcher (when the table will not be waited for). */
  stop(): Promise<void>;
}

const TABLE_WATCH = new URL("./table_watch.ts", import.meta.url).pathname;

/**
 * Starts `table_watch.ts` inside `ns`, waiting for table `table` (`family name`, default `ip
 * kube-nftproxy`) for at most `timeoutMs`, and resolves once it is polling: start it before the
 * daemon, so its own start-up is not in the daemon's figures. One process asking the kernel over
 * netlink, not a listing per poll (see table_watch.ts for why).
 */
export async function startTableWatch(
  ns: string,
  timeoutMs: number,
  table = "ip kube-nftproxy",
): Promise<TableWatch> {
  const deno = Deno.realPathSync(Deno.execPath());
  const [program, ...args] = commandLine([
    deno,
    "run",
    "--cached-only",
    "--allow-ffi",
    TABLE_WATCH,
    ...table.split(" "),
    String(timeoutMs),
  ], ns);
  const child = new Deno.Command(program, {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: { ...DENO_ENV },
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  const next = async (): Promise<Record<string, unknown> | undefined> => {
    while (!buffered.includes("\n")) {
      const { done, value } = await lines.read();
      if (done) return undefined;
      buffered += value;
    }
    const newline = buffered.indexOf("\n");
    const line = buffered.slice(0, newline);
    buffered = buffered.slice(newline + 1);
    return JSON.parse(line);
  };
  const stderr = new Response(child.stderr).text();
  const ready = await next();
  if (ready?.ready !== true) {
    throw new Error(`the table watcher in ${ns} did not start: ${await stderr}`);
  }
  const answer = next();
  return {
    async found(abandon) {
      for (;;) {
        const settled = await Promise.race([answer, sleep(100).then(() => "waiting" as const)]);
        if (settled === "waiting") {
          if (abandon?.()) throw new Error(`gave up waiting for table ${table} in ${ns}`);
          continue;
        }
        if (typeof settled?.found !== "number") {
          throw new Error(`no table ${table} in ${ns} after ${timeoutMs} ms`);
        }
        // The watcher's wall-clock stamp, on this process's monotonic clock.
        return performance.now() - (Date.now() - settled.found);
      }
    },
    async stop() {
      try {
        child.kill("SIGKILL");
      } catch {
        // Already ended.
      }
      await child.status;
      await lines.cancel().catch(() => {});
      await stderr.catch(() => {});
    },
  };
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
