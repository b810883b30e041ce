/**
 * Running `nft`: applying a script as one transaction, checking one, listing and deleting our
 * tables, asking the kernel which families it takes. Scripts go to nft whole — through a private temporary file for applying (so a proxy
 * killed mid-write can never hand nft half a script), through stdin for checks — never
 * through a shell or a command line.
 *
 * A rejected script changes nothing in the kernel (nft applies a file as one transaction); the
 * error carries nft's stderr and the script line it complained about.
 *
 * @module
 */
import type { NftFamily } from "../render/nft/transaction.ts";
import { type FamilySupport, probeFamilies } from "./families.ts";
import { runProgram } from "./program.ts";

/** How `nft` is run. */
export interface NftRunnerOptions {
  /** The nft binary. Default `nft`. */
  nftPath?: string;
  /** Run inside this network namespace (`ip netns exec NS nft …`); for tests. */
  netns?: string;
}

/** `nft` rejected a script or could not be run. */
export class NftApplyError extends Error {
  /** 1-based line of the script nft complained about first, or 0. */
  readonly line: number;
  /** That line's text, or empty. */
  readonly scriptLine: string;
  /** nft's whole stderr. */
  readonly stderr: string;

  constructor(
    message: string,
    options: { line: number; scriptLine: string; stderr: string; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.name = "NftApplyError";
    this.line = options.line;
    this.scriptLine = options.scriptLine;
    this.stderr = options.stderr;
  }
}

/** Result of running one `nft` command. */
export interface NftResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `nft` with arguments and optional stdin; {@link NftApplyError} when it cannot start. */
export async function runNft(
  args: readonly string[],
  options: NftRunnerOptions & { stdin?: string; env?: Record<string, string>; timeoutMs?: number } =
    {},
): Promise<NftResult> {
  const nft = options.nftPath ?? "nft";
  try {
    return await runProgram([nft, ...args], {
      netns: options.netns,
      stdin: options.stdin,
      env: options.env,
      timeoutMs: options.timeoutMs,
    });
  } catch (err) {
    throw new NftApplyError(`cannot run ${nft}: ${(err as Error).message}`, {
      line: 0,
      scriptLine: "",
      stderr: "",
      cause: err,
    });
  }
}

/**
 * Applies a script as one transaction (`nft -f`, from a private temporary file). Throws {@link NftApplyError} naming the
 * failing line when nft refuses it; the kernel is then unchanged.
 *
 * @example
 * ```ts
 * await applyNft("add table ip kube-nftproxy\n");
 * ```
 */
export async function applyNft(script: string, options: NftRunnerOptions = {}): Promise<void> {
  // Through a private file, not a pipe: if the proxy is killed while a 10 MB script is still
  // being written into nft's stdin, nft sees end-of-file and would commit the part it got
  // whenever the cut falls on a line boundary. A file is complete before nft starts.
  const path = await Deno.makeTempFile({ prefix: "kube-nftproxy-", suffix: ".nft" });
  try {
    await Deno.writeTextFile(path, script);
    await runScript(["-f", path], script, options, false);
  } finally {
    await Deno.remove(path).catch(() => {});
  }
}

/** Checks a script without applying it (`nft -c -f -`). */
export async function checkNft(script: string, options: NftRunnerOptions = {}): Promise<void> {
  await runScript(["-c", "-f", "-"], script, options);
}

async function runScript(
  args: string[],
  script: string,
  options: NftRunnerOptions,
  viaStdin = true,
): Promise<void> {
  const result = await runNft(args, viaStdin ? { ...options, stdin: script } : options);
  if (result.code === 0) return;
  const match = /(?:^|\n)[^\n:]*:(\d+):\d+/.exec(result.stderr);
  const line = match ? Number(match[1]) : 0;
  const scriptLine = line > 0 ? (script.split("\n")[line - 1] ?? "") : "";
  const firstError = result.stderr.split("\n").find((l) => l.includes("Error")) ??
    result.stderr.trim().split("\n")[0] ?? `exit code ${result.code}`;
  const where = line > 0 ? ` at line ${line}: ${abbreviate(scriptLine)}` : "";
  throw new NftApplyError(`nft refused the transaction${where} (${firstError.trim()})`, {
    line,
    scriptLine,
    stderr: result.stderr,
  });
}

/**
 * Deletes table `table` in the `families` (default both), if present, one family at a time (a
 * kernel refusing one family still gets the other cleaned), and resolves with the families it
 * was deleted from. Other tables are never touched. Throws the first family's error after
 * trying them all.
 */
export async function deleteTables(
  table: string,
  options: NftRunnerOptions & { families?: readonly string[] } = {},
): Promise<string[]> {
  const errors: unknown[] = [];
  const deleted: string[] = [];
  for (const family of options.families ?? ["ip", "ip6"]) {
    try {
      // Asked first: a `delete table` reads the ruleset's cache (seconds beside iptables-nft's
      // rules of 10k Services), and the table is usually not there.
      if (!(await tableExists(family, table, options))) continue;
      await applyNft(`add table ${family} ${table}\ndelete table ${family} ${table}\n`, options);
      deleted.push(family);
    } catch (err) {
      errors.push(err);
    }
  }
  if (errors.length > 0) throw errors[0];
  return deleted;
}

/**
 * The families among `families` (default both) that hold a table named `table`, each asked
 * with {@link tableExists}.
 */
export async function tableFamilies(
  table: string,
  options: NftRunnerOptions & { families?: readonly string[] } = {},
): Promise<string[]> {
  const present: string[] = [];
  for (const family of options.families ?? ["ip", "ip6"]) {
    if (await tableExists(family, table, options)) present.push(family);
  }
  return present;
}

/**
 * Whether table `family table` exists, asked with a check-only `create table`, which fails
 * with EEXIST when it does and needs no cache: ~10 ms whatever the ruleset holds. What reads
 * a cache costs as much as the ruleset is big on nft 1.0.6: `nft list tables` fetches every
 * set's elements (1.6 s beside a 10k×10 table of ours) and, beside iptables-nft's rules of
 * 10k Services, 125 s and 858 MB; a check-only `delete table` fetches the chains (1.8 s there).
 */
export async function tableExists(
  family: string,
  table: string,
  options: NftRunnerOptions = {},
): Promise<boolean> {
  const result = await runNft(["-c", "create", "table", family, table], options);
  if (result.code === 0) return false;
  if (/File exists/.test(result.stderr)) return true;
  throw new NftApplyError(`cannot look for table ${family} ${table}: ${result.stderr.trim()}`, {
    line: 0,
    scriptLine: "",
    stderr: result.stderr,
  });
}

function abbreviate(text: string): string {
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}

/**
 * Probes the nft `ip` and `ip6` families with a check-only transaction naming `table`-probe.
 * Throws {@link NoIPv4Error} when `ip` is refused.
 */
export async function nftFamilySupport(
  table: string,
  options: NftRunnerOptions = {},
): Promise<FamilySupport<NftFamily>> {
  return await probeFamilies<NftFamily>(["ip", "ip6"], async (family) => {
    const probe = `${family} ${table}-probe`;
    await checkNft(
      `add table ${probe}\n` +
        `add chain ${probe} nat { type nat hook prerouting priority dstnat; policy accept; }\n` +
        `add chain ${probe} filter { type filter hook forward priority -110; policy accept; }\n`,
      options,
    );
  });
}
