/**
 * Noticing, in iptables mode, that someone removed or flushed our rules (`iptables -t nat -F`,
 * `iptables -X`, a firewalld reload): upstream kube-proxy's `KUBE-PROXY-CANARY` check plus a
 * look at the two nat jump rules every service packet goes through. Cheap with iptables-nft
 * (a few small listings); with iptables-legacy it reads the whole nat table, so it costs as
 * much as that table is big.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import { CANARY, NAT } from "../render/iptables/names.ts";
import { JUMP_RULES, jumpRuleSpec, listingHasJump } from "../render/iptables/reconcile.ts";
import {
  IptablesApplyError,
  type IptablesBackend,
  iptablesProgram,
  type IptablesRunnerOptions,
  runIptables,
} from "./iptables.ts";
import type { ProgramResult } from "./program.ts";

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
 * ~0.5 s at 10,000 (check less often than every second there).
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
