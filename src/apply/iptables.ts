/**
 * Running iptables: applying the iptables planner's scripts with `iptables-restore --noflush`
 * / `ip6tables-restore --noflush`, choosing the back end (iptables-nft or iptables-legacy) like
 * upstream's image does, asking the kernel which families it takes, and removing everything this
 * proxy created.
 *
 * Scripts always go through stdin, never through a shell or a command line. Every program runs
 * with a time limit. A refused section raises {@link IptablesApplyError} with the failing line;
 * `iptables-restore` commits table by table, so the sync loop's full sync on retry re-asserts
 * everything.
 *
 * @example
 * ```ts
 * const applier = new IptablesApplier({ backend: "auto" });
 * await applier.apply(plan.script);
 * ```
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import type { IptablesPlan } from "../render/iptables/planner.ts";
import {
  cleanupScript,
  JUMP_RULES,
  parseSave,
  reconcileSection,
  reconciliation,
  type SavedTables,
} from "../render/iptables/reconcile.ts";
import type { SectionExtras } from "../render/iptables/syncer.ts";
import { isServiceChainName } from "../render/iptables/names.ts";
import { splitSections } from "../render/iptables/script.ts";
import { type FamilySupport, probeFamilies } from "./families.ts";
import { killAfter, type ProgramResult, runProgram } from "./program.ts";

/** Which iptables implementation programs the kernel. */
export type IptablesBackend = "nft" | "legacy";

/** How iptables programs are run. */
export interface IptablesRunnerOptions {
  /** Back end. Default `nft`. */
  backend?: IptablesBackend;
  /** Run inside this network namespace (`ip netns exec NS …`); for tests. */
  netns?: string;
  /** Seconds `iptables-restore -w` waits for the xtables lock. Default 5. */
  lockWaitSeconds?: number;
  /** Time limit of each program, ms. Default 120 000. */
  timeoutMs?: number;
  /** See {@link withWholeTableCache}. Default {@link WHOLE_TABLE_CACHE_CHAINS}. */
  wholeTableCacheChains?: number;
}

/** `iptables-restore` refused a section, or an iptables program could not be run. */
export class IptablesApplyError extends Error {
  /** The family of the refused section. */
  readonly family: IPFamily;
  /** 1-based line of the section the program complained about, or 0. */
  readonly line: number;
  /** That line's text, or empty. */
  readonly scriptLine: string;
  /** The program's whole stderr. */
  readonly stderr: string;

  constructor(
    message: string,
    options: {
      family: IPFamily;
      line: number;
      scriptLine: string;
      stderr: string;
      cause?: unknown;
    },
  ) {
    super(message, { cause: options.cause });
    this.name = "IptablesApplyError";
    this.family = options.family;
    this.line = options.line;
    this.scriptLine = options.scriptLine;
    this.stderr = options.stderr;
  }
}

/** The program of a family and back end: `iptables-nft-restore`, `ip6tables-legacy-save`, …. */
export function iptablesProgram(
  tool: "restore" | "save",
  family: IPFamily,
  backend: IptablesBackend,
): string {
  return `${family === "IPv6" ? "ip6" : "ip"}tables-${backend}-${tool}`;
}

/**
 * Runs one iptables program with a time limit (default 2 minutes, or `options.timeoutMs`). A
 * program that cannot start (not installed) is a result too: exit code -1, stderr saying why.
 */
export async function runIptables(
  argv: readonly string[],
  options: IptablesRunnerOptions & { stdin?: string; discardStdout?: boolean },
): Promise<ProgramResult> {
  try {
    return await runProgram(argv, {
      netns: options.netns,
      stdin: options.stdin,
      discardStdout: options.discardStdout,
      timeoutMs: options.timeoutMs ?? 120_000,
    });
  } catch (err) {
    const stderr = `cannot run ${argv[0]}: ${(err as Error).message}`;
    return { code: -1, stdout: "", stderr, timedOut: false };
  }
}

/**
 * Loads one restore section (`iptables-restore --noflush -w N`, stdin). Throws
 * {@link IptablesApplyError} naming the failing line.
 */
export async function restoreSection(
  text: string,
  family: IPFamily,
  options: IptablesRunnerOptions = {},
): Promise<void> {
  const backend = options.backend ?? "nft";
  const program = iptablesProgram("restore", family, backend);
  const wait = String(options.lockWaitSeconds ?? 5);
  const { lines: fed, origin } = backend === "nft"
    ? arrangeForWholeTableCache(text, options.wholeTableCacheChains ?? WHOLE_TABLE_CACHE_CHAINS)
    : { lines: text.split("\n"), origin: text.split("\n").map((_, i) => i + 1) };
  const result = await runIptables([program, "--noflush", "-w", wait], {
    ...options,
    stdin: fed.join("\n"),
    discardStdout: true,
  });
  if (result.code === 0) return;
  throw restoreError(program, family, result.stderr, result.code, (fedLine) => ({
    line: origin[fedLine - 1] ?? 0,
    text: fed[fedLine - 1] ?? "",
  }));
}

/**
 * The error of a refused restore: "Error occurred at line: 3" (both back ends) or "line 3
 * failed" (older releases), named by `locate` as a line of the section as planned.
 */
function restoreError(
  program: string,
  family: IPFamily,
  stderr: string,
  code: number,
  locate: (fedLine: number) => { line: number; text: string },
): IptablesApplyError {
  const match = /line:? (\d+)/.exec(stderr);
  const fedLine = match ? Number(match[1]) : 0;
  const { line, text: scriptLine } = fedLine > 0 ? locate(fedLine) : { line: 0, text: "" };
  const first = stderr.trim().split("\n").filter((l) => l.trim() !== "" && !/^Try `/.test(l))
    .join(" ") || `exit code ${code}`;
  // iptables-nft finds some errors (a jump to a missing chain) only when the table commits.
  const whole = scriptLine === "COMMIT" ? " (the table was refused as a whole)" : "";
  const where = line > 0 ? ` at line ${line}: ${abbreviate(scriptLine)}${whole}` : "";
  return new IptablesApplyError(`${program} refused the ${family} rules${where} (${first})`, {
    family,
    line,
    scriptLine,
    stderr,
  });
}

/**
 * Loads one restore section written piece by piece (`iptables-restore --noflush -w N`, stdin):
 * each piece goes to the program as soon as it is rendered, so the section never exists whole
 * in memory and rendering overlaps the program's parsing. `render` is called again only to
 * name the line the program refused. Throws {@link IptablesApplyError}.
 */
export async function restoreStreamed(
  render: () => Iterable<string>,
  family: IPFamily,
  options: IptablesRunnerOptions = {},
): Promise<void> {
  const program = iptablesProgram("restore", family, options.backend ?? "nft");
  const argv = [program, "--noflush", "-w", String(options.lockWaitSeconds ?? 5)];
  const [cmd, ...args] = options.netns ? ["ip", "netns", "exec", options.netns, ...argv] : argv;
  let child: Deno.ChildProcess;
  try {
    child = new Deno.Command(cmd, { args, stdin: "piped", stdout: "null", stderr: "piped" })
      .spawn();
  } catch (err) {
    const stderr = `cannot run ${program}: ${(err as Error).message}`;
    throw new IptablesApplyError(stderr, { family, line: 0, scriptLine: "", stderr, cause: err });
  }
  const limit = killAfter(child, options.timeoutMs ?? 120_000);
  try {
    const stderrText = new Response(child.stderr).text();
    const writer = child.stdin.getWriter();
    const encoder = new TextEncoder();
    // One buffer for every piece: a write resolves once the pipe took the bytes, and 500
    // pieces' own buffers would wait for a garbage collection to be freed.
    const bytes = new Uint8Array(STREAM_BUFFER_BYTES);
    const pieces = render()[Symbol.iterator]();
    try {
      for (;;) {
        let piece: IteratorResult<string>;
        try {
          piece = pieces.next();
        } catch (err) {
          // Rendering failed half-way: end the program before it reads an end of input, so
          // no more of this script is committed, and say what failed rather than its exit.
          child.kill("SIGKILL");
          await child.status;
          throw err;
        }
        if (piece.done) break;
        for (let rest = piece.value; rest !== "";) {
          const { read, written } = encoder.encodeInto(rest, bytes);
          await writer.write(bytes.subarray(0, written)).catch(() => {
            throw PIPE_CLOSED;
          });
          rest = rest.slice(read);
        }
      }
      await writer.close().catch(() => {});
    } catch (err) {
      // PIPE_CLOSED: the program exited early (a refused line); its status tells why.
      if (err !== PIPE_CLOSED) throw err;
    }
    const status = await child.status;
    const stderr = await stderrText;
    if (status.code === 0 && !limit.timedOut) return;
    throw restoreError(
      program,
      family,
      limit.timedOut ? `${stderr}killed after ${options.timeoutMs ?? 120_000} ms` : stderr,
      status.code,
      (fedLine) => {
        const text = lineOf(render(), fedLine);
        return { line: fedLine, text };
      },
    );
  } finally {
    limit.cancel();
  }
}

/** Thrown inside {@link restoreStreamed} when the program closed its input early. */
const PIPE_CLOSED = new Error("the restore program closed its input");

/** Size of the buffer {@link restoreStreamed} encodes each piece into. */
const STREAM_BUFFER_BYTES = 256 * 1024;

/** The 1-based line `n` of text written in pieces, or "". */
function lineOf(pieces: Iterable<string>, n: number): string {
  let seen = 0;
  let carry = "";
  for (const piece of pieces) {
    let start = 0;
    for (let end = piece.indexOf("\n"); end >= 0; end = piece.indexOf("\n", start)) {
      if (++seen === n) return carry + piece.slice(start, end);
      carry = "";
      start = end + 1;
    }
    carry += piece.slice(start);
  }
  return seen + 1 === n ? carry : "";
}

/** Distinct chains a table part may name before {@link withWholeTableCache} steps in. */
export const WHOLE_TABLE_CACHE_CHAINS = 5000;

/**
 * Works around iptables-nft-restore's `--noflush` cost (iptables 1.8.9, measured here): for
 * every command it keeps the chain and the jump target in a sorted linked list of chains to
 * fetch (then fetched one netlink request each), so a table part naming k chains costs
 * O(commands × k): 1,000 services × 10 endpoints took 7 s, 2,000 took 92 s, 10,000 did not
 * finish in 300 s. One command naming no chain switches that bookkeeping to "the whole
 * table" — `-S`, a listing (to stdout, discarded), which changes nothing — and the same 1,000
 * services load in 0.6 s. Listing costs a dump of the table as it is, so it is added only to
 * table parts naming more than {@link WHOLE_TABLE_CACHE_CHAINS} chains.
 *
 * The listing must come early (every command before it pays), but after the rules in built-in
 * chains: with the listing first, a rule in a built-in chain of a table that does not exist
 * yet fails ("RULE_INSERT failed (No such file or directory)"). So a part that gets it is
 * reordered — declarations of the chains those rules jump to, those rules, `-S`, then
 * everything else in its order — which changes nothing in the result: a table part is one
 * transaction.
 */
export function withWholeTableCache(
  section: string,
  threshold: number = WHOLE_TABLE_CACHE_CHAINS,
): string {
  return arrangeForWholeTableCache(section, threshold).lines.join("\n");
}

/** {@link withWholeTableCache}, plus each output line's 1-based line in `section` (0: added). */
function arrangeForWholeTableCache(
  section: string,
  threshold: number,
): { lines: string[]; origin: number[] } {
  const lines: string[] = [];
  const origin: number[] = [];
  let part: { line: string; n: number }[] = [];
  const flush = () => {
    const chains = new Set<string>();
    const builtIn: typeof part = [];
    const targets = new Set<string>();
    for (const entry of part) {
      // `:CHAIN …` declares one; `-A/-I/-D/-X CHAIN …` names one; `-j TARGET` another.
      const words = entry.line.split(" ");
      if (entry.line.startsWith(":")) chains.add(words[0].slice(1));
      else if (/^-[AIDX]$/.test(words[0])) chains.add(words[1]);
      const jump = words.indexOf("-j");
      if (jump > 0) chains.add(words[jump + 1]);
      if (/^-[AID]$/.test(words[0]) && BUILT_IN_CHAINS.has(words[1])) {
        builtIn.push(entry);
        if (jump > 0) targets.add(words[jump + 1]);
      }
    }
    let ordered = part;
    if (chains.size > threshold) {
      const early = part.filter((e) =>
        e.line.startsWith(":") && targets.has(e.line.slice(1).split(" ")[0])
      );
      const first = new Set([...early, ...builtIn]);
      ordered = [...early, ...builtIn, { line: "-S", n: 0 }, ...part.filter((e) => !first.has(e))];
    }
    for (const e of ordered) {
      lines.push(e.line);
      origin.push(e.n);
    }
    part = [];
  };
  let inTable = false;
  section.split("\n").forEach((line, i) => {
    if (inTable && line !== "COMMIT") {
      part.push({ line, n: i + 1 });
      return;
    }
    if (line === "COMMIT") flush();
    inTable = line.startsWith("*");
    lines.push(line);
    origin.push(i + 1);
  });
  flush();
  return { lines, origin };
}

const BUILT_IN_CHAINS = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/**
 * The current filter and nat tables of one family (`iptables-save`; absent tables are empty).
 * Throws {@link IptablesApplyError} when the program fails.
 */
export async function saveTables(
  family: IPFamily,
  options: IptablesRunnerOptions = {},
): Promise<SavedTables> {
  return parseSave(await saveText(family, options));
}

async function saveText(family: IPFamily, options: IptablesRunnerOptions): Promise<string> {
  const program = iptablesProgram("save", family, options.backend ?? "nft");
  const result = await runIptables([program], options);
  if (result.code !== 0) {
    throw new IptablesApplyError(`${program} failed: ${result.stderr.trim()}`, {
      family,
      line: 0,
      scriptLine: "",
      stderr: result.stderr,
    });
  }
  return result.stdout;
}

/**
 * Applies a script of the iptables planner: each family's section in turn. A full-sync section
 * is first completed from the kernel's current rules (missing jump rules, leftover chains of an
 * earlier process; see `reconcileSection`), as upstream does on full syncs only.
 */
export async function applyIptables(
  script: string,
  options: IptablesRunnerOptions = {},
): Promise<void> {
  for (const section of splitSections(script)) {
    let text = section.text;
    if (section.full) text = reconcileSection(text, await saveTables(section.family, options));
    await restoreSection(text, section.family, options);
  }
}

/**
 * Applies a plan of the iptables planner, each family's section in turn, as
 * {@link applyIptables} does with its script, but a full section is streamed to
 * `iptables-restore` as it is rendered, completed from the kernel's current rules on the way.
 */
export async function applyIptablesPlan(
  plan: IptablesPlan,
  options: IptablesRunnerOptions = {},
): Promise<void> {
  for (const { family, plan: section } of plan.sections) {
    if (!section.full) {
      await restoreSection(section.script, family, options);
      continue;
    }
    // The first full sync reads the whole tables (leftovers of an earlier process); later ones
    // only the built-in chains holding our jump rules: our own stale chains the plan knows,
    // and dumping 100,000 rules per re-sync cost seconds and hundreds of MiB.
    const saved = section.fresh
      ? await saveTables(family, options)
      : await builtInChainRules(family, options);
    const { first, stale } = reconciliation(saved);
    const extras: SectionExtras = {
      first,
      stale,
      wholeTableCacheAbove: (options.backend ?? "nft") === "nft"
        ? options.wholeTableCacheChains ?? WHOLE_TABLE_CACHE_CHAINS
        : undefined,
      // Only where the chains are to be created: over existing ones (a re-sync, a restart) the
      // sorted order made iptables-legacy slower (5.1–5.5 s → 7.3–7.9 s at 10k×10).
      sortedDeclarations: options.backend === "legacy" && section.fresh &&
        ![...saved.nat.chains].some(isServiceChainName),
    };
    await restoreStreamed(() => section.chunks(extras), family, options);
  }
}

/**
 * The rules of the built-in chains our jump rules live in (`iptables -t TABLE -S CHAIN`), as
 * saved tables without other chains. Throws {@link IptablesApplyError} when a listing fails.
 */
export async function builtInChainRules(
  family: IPFamily,
  options: IptablesRunnerOptions = {},
): Promise<SavedTables> {
  const program = `${family === "IPv6" ? "ip6" : "ip"}tables-${options.backend ?? "nft"}`;
  const wanted = [...new Set(JUMP_RULES.map((j) => `${j.table} ${j.chain}`))];
  const listings = await Promise.all(wanted.map(async (pair) => {
    const [table, chain] = pair.split(" ");
    const argv = [program, "-t", table, "-S", chain, "-w", String(options.lockWaitSeconds ?? 5)];
    const result = await runIptables(argv, { ...options, timeoutMs: options.timeoutMs });
    // A table that does not exist yet has no rules (exit 1).
    if (result.code === 1) return "";
    if (result.code !== 0) {
      throw new IptablesApplyError(`${program} -t ${table} -S ${chain} failed: ${result.stderr}`, {
        family,
        line: 0,
        scriptLine: "",
        stderr: result.stderr,
      });
    }
    return `*${table}\n${result.stdout}`;
  }));
  const parsed = parseSave(listings.join("\n"));
  return {
    filter: { chains: new Set(), rules: parsed.filter.rules },
    nat: { chains: new Set(), rules: parsed.nat.rules },
    mangle: { chains: new Set(), rules: [] },
  };
}

/** What {@link chooseBackend} looks at: `iptables-save` output of each back end. */
export interface BackendEvidence {
  /** `iptables-nft-save` + `ip6tables-nft-save` output (all tables). */
  readonly nft: string;
  /** `iptables-legacy-save` + `ip6tables-legacy-save` output (all tables). */
  readonly legacy: string;
}

/**
 * Chooses the back end the node already uses, like upstream's iptables-wrapper: the one where
 * kubelet left its hint chains (`KUBE-IPTABLES-HINT`, `KUBE-KUBELET-CANARY`); else the one
 * holding our (or kube-proxy's) `KUBE-SERVICES`; else the one with more rules; nft on a tie.
 */
export function chooseBackend(evidence: BackendEvidence): IptablesBackend {
  const has = (text: string, pattern: RegExp) => text.split("\n").some((l) => pattern.test(l));
  for (const pattern of [/^:(KUBE-IPTABLES-HINT|KUBE-KUBELET-CANARY) /, /^:KUBE-SERVICES /]) {
    if (has(evidence.nft, pattern)) return "nft";
    if (has(evidence.legacy, pattern)) return "legacy";
  }
  const rules = (text: string) => text.split("\n").filter((l) => l.startsWith("-")).length;
  return rules(evidence.legacy) > rules(evidence.nft) ? "legacy" : "nft";
}

/** Runs both back ends' `iptables-save` (both families) and {@link chooseBackend}. */
export async function detectBackend(
  options: Omit<IptablesRunnerOptions, "backend"> = {},
): Promise<IptablesBackend> {
  const evidence = { nft: "", legacy: "" };
  for (const backend of ["nft", "legacy"] as const) {
    for (const family of ["IPv4", "IPv6"] as const) {
      // A back end that does not run here has no rules: its evidence stays empty.
      const result = await runIptables([iptablesProgram("save", family, backend)], {
        ...options,
        timeoutMs: options.timeoutMs ?? 10_000,
      });
      if (result.code === 0) evidence[backend] += result.stdout;
    }
  }
  return chooseBackend(evidence);
}

/**
 * Probes `iptables-save -t nat` and `-t mangle` (the canary's table) of each family with the
 * back end (read-only). Throws {@link NoIPv4Error} when IPv4 is refused.
 */
export async function iptablesFamilySupport(
  options: IptablesRunnerOptions = {},
): Promise<FamilySupport<IPFamily>> {
  return await probeFamilies<IPFamily>(["IPv4", "IPv6"], async (family) => {
    const program = iptablesProgram("save", family, options.backend ?? "nft");
    for (const table of ["nat", "mangle"]) {
      const out = await runIptables([program, "-t", table], { ...options, timeoutMs: 10_000 });
      if (out.code !== 0) {
        throw new Error(out.stderr.trim() || `${program} -t ${table} exited with ${out.code}`);
      }
    }
  });
}

/**
 * Removes our jump rules and KUBE-* chains from both families of the given back ends (default
 * both), leaving every other rule and chain as it was. A family whose save fails (its program
 * missing) is skipped.
 */
export async function cleanupIptables(
  options: Omit<IptablesRunnerOptions, "backend"> & { backends?: readonly IptablesBackend[] } = {},
): Promise<void> {
  for (const backend of options.backends ?? ["nft", "legacy"]) {
    for (const family of ["IPv4", "IPv6"] as const) {
      const runner = { ...options, backend };
      let saved: SavedTables;
      try {
        saved = await saveTables(family, runner);
      } catch {
        continue;
      }
      const script = cleanupScript(saved);
      if (script !== "") await restoreSection(script, family, runner);
    }
  }
}

/** Options of {@link IptablesApplier}. */
export interface IptablesApplierOptions extends Omit<IptablesRunnerOptions, "backend"> {
  /** Back end, or `auto` to {@link detectBackend} before the first apply. Default `auto`. */
  backend?: IptablesBackend | "auto";
  /** Receives one line naming the back end once it is chosen. */
  log?: (line: string) => void;
}

/** Applies iptables scripts with one back end, chosen once. */
export class IptablesApplier {
  readonly #options: IptablesApplierOptions;
  #backend: Promise<IptablesBackend> | undefined;

  constructor(options: IptablesApplierOptions = {}) {
    this.#options = options;
  }

  /** The back end in use (detected on first call with `auto`). */
  backend(): Promise<IptablesBackend> {
    this.#backend ??= (async () => {
      const wanted = this.#options.backend ?? "auto";
      const backend = wanted === "auto" ? await detectBackend(this.#options) : wanted;
      this.#options.log?.(
        `iptables back end: ${backend}${wanted === "auto" ? " (detected)" : ""}`,
      );
      return backend;
    })();
    return this.#backend;
  }

  /** Applies a script of the iptables planner (see {@link applyIptables}). */
  async apply(script: string): Promise<void> {
    if (script === "") return;
    await applyIptables(script, { ...this.#options, backend: await this.backend() });
  }

  /** Applies a plan of the iptables planner, streaming its full sections. */
  async applyPlan(plan: IptablesPlan): Promise<void> {
    if (plan.sections.length === 0) return;
    await applyIptablesPlan(plan, { ...this.#options, backend: await this.backend() });
  }
}

/** Whether the kernel's `nf_conntrack_tcp_be_liberal` is set (then no INVALID drop rule). */
export async function readConntrackTCPLiberal(
  path = "/proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal",
): Promise<boolean> {
  try {
    return (await Deno.readTextFile(path)).trim() !== "0";
  } catch {
    return false;
  }
}

function abbreviate(text: string): string {
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}
