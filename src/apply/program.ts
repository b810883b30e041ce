/**
 * Running one program the proxy depends on (`nft`, `iptables-restore`, `conntrack`, …): no
 * shell, optionally inside a network namespace (`ip netns exec`, for tests), input on stdin,
 * and an optional time limit after which it is killed.
 *
 * @module
 */

/** What a program printed, its exit code, and whether the time limit killed it. */
export interface ProgramResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
}

/** How a program is run. */
export interface RunProgramOptions {
  /** Run inside this network namespace (`ip netns exec NS …`); for tests. */
  netns?: string;
  /** Written to the program's stdin, which is then closed. Default: no stdin. */
  stdin?: string;
  /** Kill the program (SIGKILL) after this many ms. Default: no limit. */
  timeoutMs?: number;
  /** Do not collect stdout (large listings nobody reads). Default false. */
  discardStdout?: boolean;
  /** Extra environment variables (e.g. `LC_ALL=C` for messages read by code). */
  env?: Record<string, string>;
}

/**
 * Runs `argv` and waits for it. Throws when the program cannot be started (not installed);
 * any exit code, a kill by the time limit included, is a result.
 *
 * @example
 * ```ts
 * const { code, stdout } = await runProgram(["nft", "list", "tables"], { timeoutMs: 10_000 });
 * ```
 */
export async function runProgram(
  argv: readonly string[],
  options: RunProgramOptions = {},
): Promise<ProgramResult> {
  const [cmd, ...args] = options.netns ? ["ip", "netns", "exec", options.netns, ...argv] : argv;
  const child = new Deno.Command(cmd, {
    args,
    env: options.env,
    stdin: options.stdin === undefined ? "null" : "piped",
    stdout: options.discardStdout ? "null" : "piped",
    stderr: "piped",
  }).spawn();
  const limit = killAfter(child, options.timeoutMs);
  try {
    if (options.stdin !== undefined) {
      const writer = child.stdin.getWriter();
      // A program that exits early (a bad line) closes the pipe; its exit code tells why.
      await writer.write(new TextEncoder().encode(options.stdin)).catch(() => {});
      await writer.close().catch(() => {});
    }
    const out = await child.output();
    const decoder = new TextDecoder();
    return {
      code: out.code,
      stdout: options.discardStdout ? "" : decoder.decode(out.stdout),
      stderr: decoder.decode(out.stderr),
      timedOut: limit.timedOut,
    };
  } finally {
    limit.cancel();
  }
}

/** The time limit {@link killAfter} set on a child. */
export interface TimeLimit {
  /** The limit was reached and the child killed. */
  readonly timedOut: boolean;
  /** Stops the timer (call once the child has exited). */
  cancel(): void;
}

/** Kills `child` with SIGKILL after `ms` (never when undefined). */
export function killAfter(child: Deno.ChildProcess, ms: number | undefined): TimeLimit {
  let timedOut = false;
  const timer = ms === undefined ? undefined : setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch {
      // it exited just now
    }
  }, ms);
  return {
    get timedOut() {
      return timedOut;
    },
    cancel: () => clearTimeout(timer),
  };
}
