/**
 * The process's limit on open file descriptors, and how many of them the proxy's HTTP servers
 * may hold ({@link connectionBudget}).
 *
 * Deno raises its soft limit to the hard one at start (soft 1024 / hard 20,000 → 20,000), so the
 * hard limit is the one in force: 524,288 under containerd 2, 1,024 where a runtime or an
 * operator sets `nofile=1024:1024` (podman here needs exactly that). Deno 2.9.6 does not merely
 * fail an operation at the limit: it panics in its own code (seen here: registering a signal
 * handler, probing the stack), which ends the process. So the servers get half the limit at most
 * and the rest stays for the runtime, the `nft`/`iptables-restore`/`conntrack` pipes, the API
 * watches and the file watch.
 *
 * @example
 * ```ts
 * const limit = readDescriptorLimit(); // { soft: 1024, hard: 1024 } under `ulimit -n 1024`
 * const budget = connectionBudget(limit?.soft); // 384
 * ```
 *
 * @module
 */

/** The limits of `RLIMIT_NOFILE`; `Infinity` for `unlimited`. */
export interface DescriptorLimit {
  readonly soft: number;
  readonly hard: number;
}

/** Below this many descriptors the start-up log warns. */
export const LOW_DESCRIPTOR_LIMIT = 4096;

/** Descriptors always left to the rest of the process, beyond the half kept back. */
const RESERVED = 128;
/** Fewest and most connections the servers may hold together. */
const MIN_BUDGET = 16;
const MAX_BUDGET = 4096;
/** Assumed when the limit cannot be read (not Linux): the usual default soft limit. */
const ASSUMED_LIMIT = 1024;

/**
 * Reads `Max open files` out of the text of `/proc/<pid>/limits`; undefined when absent.
 *
 * @example
 * ```ts
 * parseDescriptorLimit("Max open files            1024                 1024                 files");
 * // { soft: 1024, hard: 1024 }
 * ```
 */
export function parseDescriptorLimit(text: string): DescriptorLimit | undefined {
  const match = /^Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/m.exec(text);
  if (match === null) return undefined;
  const value = (s: string) => (s === "unlimited" ? Infinity : Number(s));
  return { soft: value(match[1]), hard: value(match[2]) };
}

/** This process's descriptor limits, from `/proc/self/limits`; undefined off Linux. */
export function readDescriptorLimit(): DescriptorLimit | undefined {
  try {
    return parseDescriptorLimit(Deno.readTextFileSync("/proc/self/limits"));
  } catch {
    return undefined;
  }
}

/** How many descriptors this process has open now (`/proc/self/fd`); undefined off Linux. */
export function countOpenDescriptors(): number | undefined {
  try {
    let count = 0;
    for (const _ of Deno.readDirSync("/proc/self/fd")) count++;
    return count - 1; // the directory being read
  } catch {
    return undefined;
  }
}

/**
 * How many connections the health, metrics and health-check servers may hold together, for a
 * soft descriptor limit (undefined: unknown, taken as 1,024): half the limit less 128, between
 * 16 and 4,096.
 *
 * @example
 * ```ts
 * connectionBudget(1024); // 384
 * connectionBudget(524288); // 4096
 * ```
 */
export function connectionBudget(limit: number | undefined): number {
  const known = limit === undefined || !(limit > 0) ? ASSUMED_LIMIT : limit;
  return Math.max(MIN_BUDGET, Math.min(MAX_BUDGET, Math.floor(known / 2) - RESERVED));
}
