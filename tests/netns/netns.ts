/**
 * Low-level network-namespace helpers for the data-plane tests: running a program (optionally
 * inside a namespace), creating, listing and deleting `knp-` namespaces, long-running processes,
 * and the "can this machine run namespace tests at all" check.
 *
 * Safety rules enforced here rather than trusted to callers: every namespace this module creates
 * or deletes has the `knp-` prefix; `nft`, `conntrack`, `sysctl` and `iptables*` refuse to run
 * outside a namespace; programs are started without a shell (arguments are an array); every run
 * has a time limit.
 *
 * @example
 * ```ts
 * const ns = "knp-1a2b3c-demo";
 * await createNamespace(ns);
 * try {
 *   const r = await run(["ip", "-o", "link"], { ns });
 * } finally {
 *   await deleteNamespace(ns);
 * }
 * ```
 *
 * @module
 */
import { runProgram } from "../../src/apply/program.ts";

/** Every namespace the harness creates starts with this. */
export const NETNS_PREFIX = "knp-";

/** Where `ip netns` keeps its named namespaces. */
const NETNS_DIR = "/run/netns";

/** Default time limit of {@link run}. */
const DEFAULT_RUN_TIMEOUT_MS = 10_000;

/** Programs that change or read kernel state and must never run in the machine's namespace. */
const NAMESPACE_ONLY = new Set([
  "nft",
  "conntrack",
  "sysctl",
  "iptables",
  "ip6tables",
  "iptables-restore",
  "ip6tables-restore",
  "iptables-nft",
  "iptables-nft-restore",
  "ip6tables-nft-restore",
]);

/** Label on a namespace's `lo` recording which process created it (see {@link cleanupStale}). */
const OWNER_ALIAS_PREFIX = "knp-owner=";

/** What {@link run} returns: exit code and decoded output. */
export interface RunResult {
  /** Exit code; 137 (SIGKILL) after a timeout. */
  code: number;
  stdout: string;
  stderr: string;
  /** True when the time limit killed the program. */
  timedOut: boolean;
}

/** Options of {@link run}. */
export interface RunOptions {
  /** Run inside this namespace (via `ip netns exec`). Default: the caller's namespace. */
  ns?: string;
  /** Text written to the program's stdin, which is then closed. Default: no stdin. */
  stdin?: string;
  /** Kill the program (SIGKILL) after this long. Default 10 000 ms. */
  timeoutMs?: number;
  /** Extra environment variables (merged over the caller's). */
  env?: Record<string, string>;
}

/** A program the harness ran failed; carries the command line, exit code and stderr. */
export class NetnsCommandError extends Error {
  /** The program and its arguments. */
  readonly cmd: readonly string[];
  /** The namespace it ran in, if any. */
  readonly ns?: string;
  /** Its exit code. */
  readonly code: number;
  /** What it wrote to stderr. */
  readonly stderr: string;

  constructor(cmd: readonly string[], result: RunResult, ns?: string) {
    const where = ns ? ` in namespace ${ns}` : "";
    const why = result.timedOut ? "timed out" : `exited ${result.code}`;
    super(`cannot run ${cmd.join(" ")}${where}: ${why}: ${result.stderr.trim()}`);
    this.name = "NetnsCommandError";
    this.cmd = cmd;
    this.ns = ns;
    this.code = result.code;
    this.stderr = result.stderr;
  }
}

/** Builds the argv that runs `cmd` in `ns` (or as is), refusing namespace-only programs outside. */
export function commandLine(cmd: readonly string[], ns?: string): string[] {
  if (cmd.length === 0) throw new Error("cannot run an empty command");
  if (ns === undefined) {
    const program = cmd[0].split("/").pop() ?? "";
    if (NAMESPACE_ONLY.has(program)) {
      throw new Error(
        `cannot run ${cmd[0]} in the machine's own network namespace: pass a knp- namespace`,
      );
    }
    return [...cmd];
  }
  checkName(ns);
  return ["ip", "netns", "exec", ns, ...cmd];
}

/**
 * Runs a program to completion without a shell and returns its exit code and output; never
 * throws for a non-zero exit (see {@link runOk}). With `ns` it runs inside that namespace.
 *
 * @example
 * ```ts
 * const { code, stdout } = await run(["nft", "list", "ruleset"], { ns: "knp-1a2b3c-node" });
 * ```
 */
export async function run(cmd: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  // The namespace is checked (and the machine's own refused) here; runProgram runs the line.
  return await runProgram(commandLine(cmd, opts.ns), {
    stdin: opts.stdin,
    env: opts.env,
    timeoutMs: opts.timeoutMs ?? DEFAULT_RUN_TIMEOUT_MS,
  });
}

/** Like {@link run}, but throws {@link NetnsCommandError} unless the exit code is 0; returns stdout. */
export async function runOk(cmd: readonly string[], opts: RunOptions = {}): Promise<string> {
  const result = await run(cmd, opts);
  if (result.code !== 0 || result.timedOut) throw new NetnsCommandError(cmd, result, opts.ns);
  return result.stdout;
}

/**
 * Runs several `ip` commands in one process (`ip -batch -`), inside `ns` when given
 * (`ip -n NS`). One process instead of one per command keeps topology setup fast.
 */
export async function ipBatch(lines: readonly string[], opts: { ns?: string } = {}): Promise<void> {
  const args = opts.ns === undefined ? ["ip", "-batch", "-"] : ["ip", "-n", opts.ns, "-batch", "-"];
  if (opts.ns !== undefined) checkName(opts.ns);
  await runOk(args, { stdin: lines.join("\n") + "\n" });
}

function checkName(name: string): void {
  if (!name.startsWith(NETNS_PREFIX) || !/^[A-Za-z0-9_.-]{1,64}$/.test(name)) {
    throw new Error(
      `cannot use namespace name ${JSON.stringify(name)}: must start with ${NETNS_PREFIX} ` +
        "and hold only letters, digits, '.', '_' and '-' (at most 64)",
    );
  }
}

/** A short random id (6 hex digits) for namespace names, so parallel runs never collide. */
export function shortId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(3));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Identifies this process across PID reuse: `pid:starttime` from `/proc/<pid>/stat`. */
async function processIdentity(pid: number): Promise<string | undefined> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    // Field 22 (starttime) counted after the parenthesised command name, which may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return `${pid}:${fields[19]}`;
  } catch {
    return undefined;
  }
}

/**
 * Creates namespace `name` (must start with `knp-`), brings its `lo` up and labels `lo` with
 * this process's identity so {@link cleanupStale} can later tell live namespaces from leftovers.
 */
export async function createNamespace(name: string): Promise<void> {
  checkName(name);
  await runOk(["ip", "netns", "add", name]);
  const owner = (await processIdentity(Deno.pid)) ?? `${Deno.pid}:0`;
  try {
    await runOk(["ip", "-n", name, "link", "set", "lo", "up", "alias", OWNER_ALIAS_PREFIX + owner]);
  } catch (err) {
    await deleteNamespace(name);
    throw err;
  }
}

/**
 * Deletes namespace `name` (must start with `knp-`); a missing namespace is not an error.
 * With `killProcesses`, processes still inside it are killed first (SIGKILL, by pid): a
 * namespace with a process left inside would otherwise live on, unnamed, after the delete.
 */
export async function deleteNamespace(
  name: string,
  opts: { killProcesses?: boolean } = {},
): Promise<void> {
  checkName(name);
  if (!(await exists(`${NETNS_DIR}/${name}`))) return;
  if (opts.killProcesses) {
    const pids = await run(["ip", "netns", "pids", name], { timeoutMs: 5_000 });
    for (const pid of pids.stdout.split(/\s+/).filter((p) => /^\d+$/.test(p))) {
      try {
        Deno.kill(Number(pid), "SIGKILL");
      } catch {
        // it exited meanwhile
      }
    }
  }
  const result = await run(["ip", "netns", "del", name], { timeoutMs: 5_000 });
  if (result.code !== 0 && (await exists(`${NETNS_DIR}/${name}`))) {
    throw new NetnsCommandError(["ip", "netns", "del", name], result);
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

/** Names of the existing named namespaces starting with `prefix` (default `knp-`), sorted. */
export async function listNamespaces(prefix: string = NETNS_PREFIX): Promise<string[]> {
  const names: string[] = [];
  try {
    for await (const entry of Deno.readDir(NETNS_DIR)) {
      if (entry.name.startsWith(prefix)) names.push(entry.name);
    }
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  return names.sort();
}

/** The `pid:starttime` recorded on a namespace's `lo` by {@link createNamespace}, if any. */
export async function namespaceOwner(name: string): Promise<string | undefined> {
  checkName(name);
  const result = await run(["ip", "-n", name, "-o", "link", "show", "lo"], { timeoutMs: 5_000 });
  const match = result.stdout.match(/alias knp-owner=(\d+:\d+)/);
  return match?.[1];
}

/**
 * Deletes the namespaces starting with `prefix` (default `knp-`) that earlier runs left behind:
 * those whose creating process (recorded by {@link createNamespace}) no longer exists. Namespaces
 * without an owner label (made by other tools) are left alone unless `includeUnowned` is set.
 * Returns the deleted names.
 */
export async function cleanupStale(
  prefix: string = NETNS_PREFIX,
  opts: { includeUnowned?: boolean } = {},
): Promise<string[]> {
  if (!prefix.startsWith(NETNS_PREFIX)) {
    throw new Error(`cannot clean up namespaces with prefix ${prefix}: must start with knp-`);
  }
  const deleted: string[] = [];
  for (const name of await listNamespaces(prefix)) {
    const owner = await namespaceOwner(name);
    const stale = owner === undefined
      ? opts.includeUnowned === true
      : (await processIdentity(Number(owner.split(":")[0]))) !== owner;
    if (!stale) continue;
    await deleteNamespace(name, { killProcesses: true });
    deleted.push(name);
  }
  return deleted;
}

/** Answer of {@link canUseNetns}. */
export interface NetnsSupport {
  ok: boolean;
  /** Why namespace tests cannot run here (set when `ok` is false). */
  reason?: string;
}

let support: Promise<NetnsSupport> | undefined;

/**
 * Whether this machine can run the data-plane tests: running as root, `ip` and `nft` present,
 * and a namespace can really be created and deleted. Checked once per process.
 */
export function canUseNetns(): Promise<NetnsSupport> {
  support ??= checkNetns();
  return support;
}

async function checkNetns(): Promise<NetnsSupport> {
  if (Deno.build.os !== "linux") return { ok: false, reason: "network namespaces need Linux" };
  try {
    if (Deno.uid() !== 0) return { ok: false, reason: "network namespaces need root" };
  } catch (err) {
    return { ok: false, reason: `cannot tell the user id: ${err}` };
  }
  for (const program of [["ip", "-V"], ["nft", "--version"]]) {
    try {
      // Version queries only: they touch no kernel state.
      const result = await new Deno.Command(program[0], {
        args: program.slice(1),
        stdout: "null",
        stderr: "null",
      }).output();
      if (!result.success) return { ok: false, reason: `${program[0]} does not run` };
    } catch {
      return { ok: false, reason: `${program[0]} is not installed` };
    }
  }
  const name = `${NETNS_PREFIX}${shortId()}-check`;
  try {
    await createNamespace(name);
  } catch (err) {
    return { ok: false, reason: `cannot create a network namespace: ${err}` };
  } finally {
    try {
      await deleteNamespace(name);
    } catch {
      // reported below if it is still there
    }
  }
  if ((await listNamespaces(name)).length > 0) {
    return { ok: false, reason: `cannot delete network namespace ${name}` };
  }
  return { ok: true };
}

/**
 * Set by `deno task test` (scripts/run_tests.ts): a file where every test module whose gate skips
 * the data-plane tests appends one line with the reason, so the run can end by saying so.
 */
export const SKIP_REPORT_ENV = "KNP_DATA_PLANE_SKIP_REPORT";

/** Set to `1` by `deno task test:unit`: skip the data-plane tests even where they could run. */
export const UNIT_ONLY_ENV = "KNP_UNIT_TESTS_ONLY";

/**
 * How a data-plane test should be declared here: `ignore` when namespaces cannot be used,
 * except under `CI=true`, where the test must run and fail with `reason` (see {@link canUseNetns}),
 * and always under `KNP_UNIT_TESTS_ONLY=1` (`deno task test:unit`). A skip is reported to the
 * file named by `KNP_DATA_PLANE_SKIP_REPORT`, when set.
 *
 * @example
 * ```ts
 * const gate = await netnsTestGate();
 * Deno.test({ name: "…", ignore: gate.ignore, fn: async () => { gate.assertUsable(); … } });
 * ```
 */
export async function netnsTestGate(): Promise<
  { ignore: boolean; reason?: string; assertUsable(): void }
> {
  const unitOnly = Deno.env.get(UNIT_ONLY_ENV) === "1";
  const { ok, reason } = unitOnly
    ? { ok: false, reason: "unit tests only (deno task test:unit)" }
    : await canUseNetns();
  const ci = Deno.env.get("CI") === "true";
  const ignore = unitOnly || (!ok && !ci);
  const report = Deno.env.get(SKIP_REPORT_ENV);
  if (ignore && report) await Deno.writeTextFile(report, `${reason}\n`, { append: true });
  return {
    ignore,
    reason,
    assertUsable() {
      if (!ok) throw new Error(`network namespace tests cannot run here: ${reason}`);
    },
  };
}

/** Options of {@link startProcess}. */
export interface StartOptions {
  /** Extra environment variables (merged over the caller's). */
  env?: Record<string, string>;
  /** Bytes of stdout+stderr kept for {@link ManagedProcess.output}. Default 256 KiB. */
  keepBytes?: number;
  /** Called with every complete line the program writes to stdout (without the newline). */
  onLine?: (line: string) => void;
}

/** A long-running program started by {@link startProcess}. */
export interface ManagedProcess {
  /** The process id (the program itself: `ip netns exec` replaces itself with it). */
  readonly pid: number;
  /** The command it runs. */
  readonly cmd: readonly string[];
  /** Resolves with the exit status when it ends. */
  readonly status: Promise<Deno.CommandStatus>;
  /** Its stdout and stderr so far (interleaved; the most recent `keepBytes`). */
  output(): string;
  /**
   * Resolves with the output once it contains `pattern`; rejects after `timeoutMs`
   * (default 10 000) or when the process ends first.
   */
  waitForOutput(pattern: string | RegExp, timeoutMs?: number): Promise<string>;
  /** Stops it: SIGTERM, then SIGKILL after `graceMs` (default 1000). Idempotent. */
  stop(graceMs?: number): Promise<Deno.CommandStatus>;
}

/**
 * Starts a long-running program without a shell (inside `ns` when given), keeping its output.
 * The caller must `stop()` it; the topology does so at cleanup for processes it started.
 */
export function startProcess(
  cmd: readonly string[],
  opts: StartOptions & { ns?: string } = {},
): ManagedProcess {
  const argv = commandLine(cmd, opts.ns);
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    env: opts.env,
  }).spawn();
  const keep = opts.keepBytes ?? 256 * 1024;
  let text = "";
  const listeners = new Set<() => void>();
  let ended = false;
  const pump = async (stream: ReadableStream<Uint8Array>, onLine?: (line: string) => void) => {
    const decoder = new TextDecoder();
    let partial = "";
    for await (const chunk of stream) {
      const piece = decoder.decode(chunk, { stream: true });
      text += piece;
      if (text.length > keep) text = text.slice(text.length - keep);
      if (onLine) {
        const lines = (partial + piece).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) onLine(line);
      }
      for (const l of listeners) l();
    }
    if (onLine && partial !== "") onLine(partial);
  };
  const pumps = Promise.all([pump(child.stdout, opts.onLine), pump(child.stderr)]).catch(() => {});
  const status = child.status.then(async (s) => {
    await pumps;
    ended = true;
    for (const l of listeners) l();
    return s;
  });
  let stopping: Promise<Deno.CommandStatus> | undefined;
  const matches = (pattern: string | RegExp) =>
    typeof pattern === "string" ? text.includes(pattern) : pattern.test(text);
  return {
    pid: child.pid,
    cmd: [...cmd],
    status,
    output: () => text,
    waitForOutput(pattern, timeoutMs = 10_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          if (matches(pattern)) {
            done();
            resolve(text);
          } else if (ended) {
            done();
            reject(new Error(`${cmd.join(" ")} ended before printing ${pattern}: ${text}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(
            new Error(`${cmd.join(" ")} did not print ${pattern} in ${timeoutMs} ms: ${text}`),
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
    stop(graceMs = 1000) {
      stopping ??= (async () => {
        if (!ended) {
          try {
            child.kill("SIGTERM");
          } catch {
            // already exited
          }
        }
        let timer: ReturnType<typeof setTimeout> | undefined;
        const killed = new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            try {
              child.kill("SIGKILL");
            } catch {
              // already exited
            }
            resolve();
          }, graceMs);
        });
        const result = await Promise.race([status, killed.then(() => status)]);
        clearTimeout(timer);
        return result;
      })();
      return stopping;
    },
  };
}
