/**
 * Noticing, in iptables mode, that someone removed or flushed our rules (`iptables -t nat -F`,
 * `iptables -X`, a firewalld reload): upstream kube-proxy's `KUBE-PROXY-CANARY` check plus a
 * look at the two nat jump rules every service packet goes through. With iptables-nft the
 * tables are nftables tables, asked over netlink without any child (or, where netlink cannot
 * be used, with a few small listings). With iptables-legacy that full check reads the whole nat
 * table, so {@link IptablesRulesWatch} runs it only when the kernel's summary of the mangle or
 * nat table (iptables_info.ts, constant cost) changed since our rules were last known intact,
 * or every few minutes.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import { CANARY, NAT } from "../render/iptables/names.ts";
import { JUMP_RULES, jumpRuleSpec, listingHasJump } from "../render/iptables/reconcile.ts";
import { nftFamilyOf } from "../render/nft/transaction.ts";
import {
  IptablesApplyError,
  type IptablesBackend,
  iptablesProgram,
  type IptablesRunnerOptions,
  runIptables,
} from "./iptables.ts";
import { chainExists, dumpRules, netlinkOr } from "./nft_netlink.ts";
import type { ProgramResult } from "./program.ts";
import {
  readTableInfo,
  sameTableInfo,
  type TableInfo,
  tableInfoAvailable,
  TableInfoError,
} from "./iptables_info.ts";

/** Options of {@link iptablesRulesIntact}. */
export interface IptablesRulesIntactOptions
  extends Pick<IptablesRunnerOptions, "lockWaitSeconds" | "timeoutMs"> {
  /** The back end our rules were applied with (`IptablesApplier.backend()`). */
  readonly backend: IptablesBackend;
  /** The families the proxy programs. */
  readonly families: readonly IPFamily[];
  /** Look inside this network namespace; for tests. */
  readonly netns?: string;
}

/** The nat jump rules into KUBE-SERVICES (PREROUTING and OUTPUT) that serve every service. */
const SERVICE_JUMPS = JUMP_RULES.filter((j) => j.table === "nat" && j.target === NAT.services);

/**
 * True when, in each of `families`, the mangle table still holds the empty
 * `KUBE-PROXY-CANARY` chain our full syncs create (gone after `iptables -t mangle -X`, a
 * firewall reload or `nft flush ruleset`) and nat PREROUTING and OUTPUT still jump to
 * KUBE-SERVICES (gone after `iptables -t nat -F`). False as soon as one is missing.
 *
 * iptables-nft: three `iptables -S` listings per family, side by side, none of a chain that
 * grows with the number of services: ~11 ms per check (both families) at 10 or 10,000
 * services. iptables-legacy cannot read one chain without copying and parsing the whole table
 * under the xtables lock, so there the steps run one after the other — the mangle canary
 * (small table), then one `iptables-restore --test` pass checking (`-C`) both nat jumps — and
 * the check costs as much as the nat table is big: ~50 ms at 1,000 services × 10 endpoints,
 * ~0.5 s at 10,000 ({@link IptablesRulesWatch} runs it only when the tables changed).
 *
 * Throws {@link IptablesApplyError} when a program fails for another reason than a missing
 * chain or rule (the xtables lock held past `lockWaitSeconds`, default 5, exits 4): then
 * nothing is known, as with upstream's resource errors.
 *
 * @example
 * ```ts
 * rulesIntact: async () =>
 *   iptablesRulesIntact({ backend: await applier.backend(), families: ["IPv4", "IPv6"] }),
 * ```
 */
export async function iptablesRulesIntact(options: IptablesRulesIntactOptions): Promise<boolean> {
  if (options.backend === "legacy") {
    for (const family of options.families) {
      if (await listing(family, "mangle", CANARY, options) === undefined) return false;
      if (!(await natJumpsPresent(family, options))) return false;
    }
    return true;
  }
  const checks = options.families.flatMap((family) => [
    listing(family, "mangle", CANARY, options).then((out) => out !== undefined),
    ...SERVICE_JUMPS.map((jump) =>
      listing(family, jump.table, jump.chain, options).then((out) =>
        out !== undefined && listingHasJump(out, jump)
      )
    ),
  ]);
  return (await Promise.all(checks)).every(Boolean);
}

/**
 * {@link iptablesRulesIntact} for iptables-nft, asked over netlink in the process's own
 * namespace: per family, the canary chain (one get request) and a rule in nat PREROUTING and
 * OUTPUT jumping to KUBE-SERVICES (those two chains' rules only, whatever the number of
 * services). No child, ~0.1 ms. Throws {@link NetlinkError} with errno 0 where netlink cannot
 * be used from here.
 */
export async function iptablesNftRulesIntactNetlink(
  families: readonly IPFamily[],
): Promise<boolean> {
  for (const family of families) {
    const nftFamily = nftFamilyOf(family);
    if (!(await chainExists(nftFamily, "mangle", CANARY))) return false;
    for (const jump of SERVICE_JUMPS) {
      const rules = await dumpRules(nftFamily, jump.table, jump.chain);
      if (!rules.some((rule) => rule.jumps.includes(jump.target))) return false;
    }
  }
  return true;
}

/**
 * The full check the daemon runs: with iptables-nft in its own namespace over netlink
 * ({@link iptablesNftRulesIntactNetlink}), falling back for good to the listings of
 * {@link iptablesRulesIntact} where FFI is not permitted or libc is not there; the listings
 * otherwise (iptables-legacy, another namespace for tests).
 */
export function iptablesRulesChecker(options: IptablesRulesIntactOptions): () => Promise<boolean> {
  const viaListings = () => iptablesRulesIntact(options);
  if (options.backend !== "nft" || options.netns !== undefined) return viaListings;
  return netlinkOr(() => iptablesNftRulesIntactNetlink(options.families), viaListings);
}

/** Options of {@link IptablesRulesWatch}. */
export interface IptablesRulesWatchOptions extends IptablesRulesIntactOptions {
  /**
   * Run the full check at least this often even when the tables' summaries are unchanged, so a
   * change that keeps every number (a rule replaced by one of the same size) is noticed in the
   * end. Default 300,000 (5 minutes).
   */
  readonly fullCheckEveryMs?: number;
  /**
   * After a full check that found another program's change harmless to our rules, wait this
   * long before the next one caused by a change, so a program changing the tables every second
   * costs no more than the plain full check every 10 s did. Default 10,000.
   */
  readonly fullCheckSpacingMs?: number;
  /** The summary of one table; default {@link readTableInfo} (for tests). */
  readonly readInfo?: (family: IPFamily, table: string) => TableInfo;
  /** The full check; default {@link iptablesRulesIntact} (for tests). */
  readonly fullCheck?: () => Promise<boolean>;
  /** Milliseconds now; default `Date.now` (for tests). */
  readonly now?: () => number;
}

/** How often the full check runs when the summaries cannot be read (iptables-legacy). */
const LEGACY_FULL_CHECK_MS = 10_000;
const ENOENT = 2;

/** The tables whose summaries stand for our rules: the canary's and the jumps'. */
const WATCHED_TABLES = ["mangle", "nat"] as const;

/**
 * The rules-intact check of the iptables back end, with memory. With iptables-legacy in the
 * process's own network namespace and FFI permitted it remembers the kernel's summary
 * (`IPT_SO_GET_INFO`: entries, bytes, built-in chain offsets) of the mangle and nat tables of
 * each family whenever our rules are known intact — after a full check that found them, and
 * after a sync of ours that started from the remembered state — and answers "intact" at once
 * while every summary is unchanged: four `getsockopt` calls, the same at 10 or 10,000
 * services. Any change (another program's rule, `iptables -t nat -F`, `-X` of our chains, a
 * deleted jump) runs {@link iptablesRulesIntact}, which decides — at once, or, while another
 * program keeps changing the tables, once per `fullCheckSpacingMs` — and so does every
 * `fullCheckEveryMs`. Otherwise (iptables-nft, a `netns` option, no `--allow-ffi`, no
 * CAP_NET_RAW for the raw socket the kernel is asked on) every check is the full one (the
 * back end then checks legacy every 10 s; {@link IptablesRulesWatch.constantCost} tells).
 *
 * iptables-legacy writes a whole new table blob for every change, and removing a rule or chain
 * always changes its entry count and size. Not seen until the periodic full check: a rule
 * replaced in place by another of exactly the same size (`iptables -R`), or a table rewritten
 * by someone else to the very same counts and offsets. Seen late (within `fullCheckSpacingMs`
 * rather than a second): our rules removed within that time after another program's change.
 * With iptables-legacy no check runs while a sync of ours is being applied (it holds the
 * xtables lock, and it is writing our rules anyway).
 *
 * @example
 * ```ts
 * const watch = new IptablesRulesWatch({ backend: "legacy", families: ["IPv4"] });
 * await watch.applied(() => applier.apply(script));
 * if (!(await watch.intact())) console.log("restore");
 * ```
 */
export class IptablesRulesWatch {
  readonly #options: IptablesRulesWatchOptions;
  readonly #readInfo: (family: IPFamily, table: string) => TableInfo;
  readonly #fullCheck: () => Promise<boolean>;
  readonly #now: () => number;
  #summaries: boolean;
  /** The summaries when our rules were last known intact; undefined: not known. */
  #known: TableInfo[] | undefined;
  #lastFullCheck = -Infinity;
  /** When a full check last found our rules intact after another program's change. */
  #lastHarmlessChange = -Infinity;
  /** Syncs of ours being applied now. */
  #applying = 0;
  /** Whether the summaries became unreadable after construction (then full checks, spaced). */
  #lost = false;
  #constructed = false;
  #lastResult = true;

  constructor(options: IptablesRulesWatchOptions) {
    this.#options = options;
    this.#readInfo = options.readInfo ?? readTableInfo;
    this.#fullCheck = options.fullCheck ?? iptablesRulesChecker(options);
    this.#now = options.now ?? Date.now;
    this.#summaries = options.backend === "legacy" && options.netns === undefined &&
      (options.readInfo !== undefined || tableInfoAvailable());
    // One read now, so that a process that may not ask (no CAP_NET_RAW for the raw socket)
    // keeps the plain full check at its slower interval from the start.
    if (this.#summaries && options.families.length > 0) this.#read();
    this.#constructed = true;
  }

  /**
   * Whether the check costs the same at any size (iptables-legacy read by its summaries);
   * false means every {@link intact} is the full check.
   */
  get constantCost(): boolean {
    return this.#summaries;
  }

  /** Whether our rules are still in the kernel; see the class doc for how it is decided. */
  async intact(): Promise<boolean> {
    // iptables-legacy: our own restore holds the xtables lock; a full check now would wait for
    // it (and give up after 5 s at 10k services). The sync is writing our rules anyway.
    if (this.#options.backend === "legacy" && this.#applying > 0) return true;
    if (!this.#summaries) {
      // Summaries lost after the start (see #read): the full check, but at most every 10 s.
      if (!this.#lost || this.#now() - this.#lastFullCheck >= LEGACY_FULL_CHECK_MS) {
        this.#lastFullCheck = this.#now();
        this.#lastResult = await this.#fullCheck();
      }
      return this.#lastResult;
    }
    const before = this.#read();
    const since = this.#now() - this.#lastFullCheck;
    const fresh = since < (this.#options.fullCheckEveryMs ?? 300_000);
    const unchanged = before !== undefined && this.#matchesKnown(before);
    if (fresh && unchanged) return true;
    // Someone else changed the tables again soon after a change that left our rules alone:
    // look closer once the spacing has passed.
    const foreignChange = this.#known !== undefined && before !== undefined && !unchanged;
    const spacing = this.#options.fullCheckSpacingMs ?? 10_000;
    if (foreignChange && this.#now() - this.#lastHarmlessChange < spacing) return true;
    this.#known = undefined;
    const intact = await this.#fullCheck();
    this.#lastFullCheck = this.#now();
    if (foreignChange && intact) this.#lastHarmlessChange = this.#lastFullCheck;
    // Remember only a state that held still while it was checked.
    const after = intact ? this.#read() : undefined;
    if (before !== undefined && after !== undefined && sameAll(before, after)) this.#known = after;
    return intact;
  }

  /**
   * Runs `apply` (one sync of ours) and, when the tables were as last known intact just before
   * it, remembers their summaries after it: our own change is no reason for a full check. When
   * they were not (someone else changed them first, or nothing is known yet), the next
   * {@link intact} runs the full check.
   */
  async applied<T>(apply: () => Promise<T>): Promise<T> {
    this.#applying++;
    try {
      if (!this.#summaries) return await apply();
      const before = this.#read();
      const continues = before !== undefined && this.#matchesKnown(before);
      this.#known = undefined;
      const result = await apply();
      if (continues) this.#known = this.#read();
      return result;
    } finally {
      this.#applying--;
    }
  }

  #matchesKnown(summaries: readonly TableInfo[]): boolean {
    return this.#known !== undefined && sameAll(this.#known, summaries);
  }

  /**
   * The summaries of the watched tables of every family, in a fixed order; undefined when one
   * cannot be read (a table not loaded: only the full check can tell). Falls back to full
   * checks for good when FFI turns out unusable.
   */
  #read(): TableInfo[] | undefined {
    try {
      return this.#options.families.flatMap((family) =>
        WATCHED_TABLES.map((table) => this.#readInfo(family, table))
      );
    } catch (error) {
      if (!(error instanceof TableInfoError)) throw error;
      // ENOENT: a table not there (yet); anything else will not get better.
      if (error.errno !== ENOENT) {
        this.#summaries = false;
        this.#lost = this.#constructed;
      }
      return undefined;
    }
  }
}

function sameAll(a: readonly TableInfo[], b: readonly TableInfo[]): boolean {
  return a.length === b.length && a.every((info, i) => sameTableInfo(info, b[i]));
}

/** Runs an iptables program with the watcher's lock wait and time limit. */
function runChecked(
  argv: readonly string[],
  options: IptablesRulesIntactOptions,
  stdin?: string,
): Promise<ProgramResult> {
  const wait = String(options.lockWaitSeconds ?? 5);
  return runIptables([...argv, "-w", wait], {
    netns: options.netns,
    timeoutMs: options.timeoutMs ?? 10_000,
    stdin,
    discardStdout: stdin !== undefined,
  });
}

/**
 * `iptables -t TABLE -S CHAIN`; undefined when the chain (or its table) does not exist.
 * Throws {@link IptablesApplyError} on any other failure.
 */
async function listing(
  family: IPFamily,
  table: string,
  chain: string,
  options: IptablesRulesIntactOptions,
): Promise<string | undefined> {
  const program = `${family === "IPv6" ? "ip6" : "ip"}tables-${options.backend}`;
  const result = await runChecked([program, "-t", table, "-S", chain], options);
  // Both back ends exit 1 for a missing chain or table ("No chain/target/match by that name",
  // "Table does not exist"); 4 is a resource problem (the lock), 2 a bad command line.
  if (result.code === 1) return undefined;
  if (result.code !== 0) throw checkError(program, family, result);
  return result.stdout;
}

/**
 * Both {@link SERVICE_JUMPS} checked in one pass over the nat table
 * (`iptables-restore --test --noflush`, `-C` lines; exit 1 when one is missing). Only for
 * iptables-legacy: iptables-nft-restore 1.8.9 with `--test` accepts a `-C` of a missing rule.
 */
async function natJumpsPresent(
  family: IPFamily,
  options: IptablesRulesIntactOptions,
): Promise<boolean> {
  const program = iptablesProgram("restore", family, options.backend);
  const checks = SERVICE_JUMPS.map((j) => `-C ${j.chain} ${jumpRuleSpec(j)}`);
  const script = ["*nat", ...checks, "COMMIT", ""].join("\n");
  const result = await runChecked([program, "--test", "--noflush"], options, script);
  if (result.code === 1) return false;
  if (result.code !== 0) throw checkError(program, family, result);
  return true;
}

function checkError(program: string, family: IPFamily, result: ProgramResult): Error {
  const why = result.stderr.trim() || `exit code ${result.code}`;
  return new IptablesApplyError(`cannot check our rules with ${program}: ${why}`, {
    family,
    line: 0,
    scriptLine: "",
    stderr: result.stderr,
  });
}
