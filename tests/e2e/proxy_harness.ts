/**
 * Runs the real proxy (`main.ts`) inside a topology's node namespace and waits for its syncs:
 * {@link startProxy} with a cluster file the test can rewrite (`--from-file`), and
 * {@link startDaemon} with any command line (e.g. against a test API server).
 *
 * The Deno binary and every npm dependency are resolved in the machine's namespace first
 * (`deno cache`), then the proxy runs with `--cached-only`: a process inside a namespace cannot
 * reach the registry (DESIGN.md §6).
 *
 * @module
 */
import { stringify } from "./yaml.ts";
import type { RawObject } from "../../src/source/events.ts";
import type { ManagedProcess } from "../netns/netns.ts";
import type { Topology } from "../netns/topology.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";

/** The path of main.ts, as the e2e tests start the proxy. */
export const MAIN = new URL("../../main.ts", import.meta.url).pathname;
const cached = new Map<string, Promise<void>>();

/**
 * Caches an entry point's dependencies once per test process (outside any namespace: a
 * process inside one cannot reach the registry).
 */
export function cacheDependencies(entry: string): Promise<void> {
  let done = cached.get(entry);
  if (done === undefined) {
    cached.set(
      entry,
      done = (async () => {
        const out = await new Deno.Command(Deno.execPath(), {
          args: ["cache", "--quiet", entry],
          stdout: "piped",
          stderr: "piped",
        }).output();
        if (!out.success) {
          throw new Error(`deno cache ${entry} failed: ${new TextDecoder().decode(out.stderr)}`);
        }
      })(),
    );
  }
  return done;
}

/** Caches main.ts's dependencies once per test process (outside any namespace). */
export function cacheProxyDependencies(): Promise<void> {
  return cacheDependencies(MAIN);
}

/** A proxy running in the node namespace. */
export interface RunningProxy {
  readonly process: ManagedProcess;
  /** Path of the cluster file it watches. */
  readonly file: string;
  /** Replaces the cluster file's objects and waits until the proxy has synced them. */
  update(objects: readonly RawObject[]): Promise<void>;
  /** The proxy's log so far. */
  output(): string;
  /**
   * Waits until the log holds at least `count` lines matching `pattern`; throws after
   * `timeoutMs` (default 30 000) with the log.
   */
  waitForLog(pattern: RegExp, count: number, timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

/** How many lines of `log` match `pattern`. */
export function countLines(log: string, pattern: RegExp): number {
  return log.split("\n").filter((line) => pattern.test(line)).length;
}

/** Polls a process's log until `count` lines match; bounded by `timeoutMs`. */
export async function waitForLines(
  output: () => string,
  pattern: RegExp,
  count: number,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (countLines(output(), pattern) < count) {
    if (Date.now() > deadline) {
      throw new Error(
        `waited ${timeoutMs} ms for ${count} log lines matching ${pattern}; the log:\n${output()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Options of {@link startProxy}. */
export interface StartProxyOptions {
  /** Extra command-line arguments. */
  args?: string[];
  /** Extra environment variables (e.g. `KUBE_NFTPROXY_NFT`). */
  env?: Record<string, string>;
  /** How long to wait for each sync (see {@link StartDaemonOptions.syncTimeoutMs}). */
  syncTimeoutMs?: number;
  /** Programs to start the proxy through (see {@link StartDaemonOptions.wrapper}). */
  wrapper?: string[];
}

/**
 * Starts `main.ts --from-file` in the node namespace and waits for its first sync.
 *
 * @example
 * ```ts
 * const proxy = await startProxy(topo, [service(...), endpointSlice(...)]);
 * ```
 */
export async function startProxy(
  topo: Topology,
  objects: readonly RawObject[],
  options: StartProxyOptions = {},
): Promise<RunningProxy> {
  const dir = await Deno.makeTempDir({ prefix: "knp-e2e-" });
  const file = `${dir}/cluster.yaml`;
  await Deno.writeTextFile(file, stringify(objects));
  let daemon: RunningDaemon;
  try {
    daemon = await startDaemon(topo, {
      args: [
        `--from-file=${file}`,
        `--hostname-override=${NODE_NAME}`,
        `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
        "--nftables-min-sync-period=50ms",
        "-v=2",
        ...(options.args ?? []),
      ],
      env: options.env,
      syncTimeoutMs: options.syncTimeoutMs,
      wrapper: options.wrapper,
    });
  } catch (err) {
    await Deno.remove(dir, { recursive: true });
    throw err;
  }
  const { process, syncs, waitForSync } = daemon;
  return {
    process,
    file,
    output: () => process.output(),
    waitForLog: (pattern, count, timeoutMs) =>
      waitForLines(() => process.output(), pattern, count, timeoutMs),
    async update(next) {
      const before = syncs();
      await Deno.writeTextFile(file, stringify(next));
      await waitForSync(before);
    },
    async stop() {
      await process.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A proxy daemon started by {@link startDaemon}. */
export interface RunningDaemon {
  readonly process: ManagedProcess;
  /** How many syncs that changed the kernel it has logged (needs `-v=1` or more). */
  syncs(): number;
  /** Waits until more than `after` syncs were logged; throws after `timeoutMs` (default: the start option's). */
  waitForSync(after: number, timeoutMs?: number): Promise<void>;
  /** The proxy's log so far. */
  output(): string;
  /** SIGTERM, then SIGKILL after `graceMs` (default 1000); resolves with the exit status. */
  stop(graceMs?: number): Promise<Deno.CommandStatus>;
}

/** Options of {@link startDaemon}. */
export interface StartDaemonOptions {
  /** The whole command line after `main.ts`; include `-v=1` or more to see syncs. */
  args: string[];
  /** Extra environment variables (e.g. `KUBE_NFTPROXY_NFT`). */
  env?: Record<string, string>;
  /** Wait for the first logged sync before returning. Default true. */
  waitForFirstSync?: boolean;
  /** How long a sync may take to be logged, ms. Default 15 000. */
  syncTimeoutMs?: number;
  /**
   * A program (and its arguments) that runs the proxy by exec'ing it, e.g.
   * `["prlimit", "--nofile=1024:1024"]`, so the process id stays the proxy's. Default: none.
   */
  wrapper?: string[];
}

/**
 * Starts `main.ts` with `options.args` in the node namespace (dependencies cached first, run
 * with `--cached-only`) and, by default, waits for its first sync.
 *
 * @example
 * ```ts
 * const daemon = await startDaemon(topo, { args: ["--kubeconfig=/tmp/k", "--hostname-override=node-a", "-v=2"] });
 * ```
 */
export async function startDaemon(
  topo: Topology,
  options: StartDaemonOptions,
): Promise<RunningDaemon> {
  await cacheProxyDependencies();
  const process = topo.startProcess(
    topo.node.ns,
    [
      ...(options.wrapper ?? []),
      Deno.execPath(),
      "run",
      "--cached-only",
      "-A",
      MAIN,
      ...options.args,
    ],
    { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1", ...options.env } },
  );
  const syncs = () => process.output().match(/\bsynced /g)?.length ?? 0;
  const waitForSync = async (after: number, timeoutMs = options.syncTimeoutMs ?? 15_000) => {
    const deadline = Date.now() + timeoutMs;
    while (syncs() <= after) {
      if (Date.now() > deadline) {
        throw new Error(
          `the proxy did not sync within ${timeoutMs} ms; its log:\n${process.output()}`,
        );
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  if (options.waitForFirstSync ?? true) {
    try {
      await waitForSync(0);
    } catch (err) {
      await process.stop();
      throw err;
    }
  }
  return {
    process,
    syncs,
    waitForSync,
    output: () => process.output(),
    stop: (graceMs) => process.stop(graceMs),
  };
}
