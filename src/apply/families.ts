/**
 * Which IP families this node's kernel lets the proxy program. A host booted with
 * `ipv6.disable=1`, or a kernel built without IPv6 NAT, refuses every `ip6` table (or
 * `ip6tables` nat table); since a sync is one transaction, one refused family would fail every
 * sync and leave IPv4 services unprogrammed too. Asked once at start-up, like upstream
 * kube-proxy does: each family is probed without changing anything (`nft -c` of a table with
 * a nat and a filter base chain; `ip6tables-save -t nat` and `-t mangle`), and a family the
 * kernel refuses is left out with a warning. Without IPv4 there is nothing to proxy.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import type { NftFamily } from "../render/nft/transaction.ts";
import { checkNft, type NftRunnerOptions } from "./nft.ts";
import { iptablesProgram, type IptablesRunnerOptions, runIptables } from "./iptables.ts";

/** What the kernel accepts, per family. */
export interface FamilySupport<F extends string> {
  /** Families to program, in the usual order (IPv4 first). */
  readonly usable: readonly F[];
  /** Families left out, with the kernel's answer. */
  readonly refused: readonly { readonly family: F; readonly reason: string }[];
}

/** The kernel refuses IPv4: the proxy cannot run. */
export class NoIPv4Error extends Error {
  constructor(reason: string) {
    super(`this kernel refuses IPv4 rules (${reason}): nothing can be proxied`);
    this.name = "NoIPv4Error";
  }
}

/**
 * Probes the nft `ip` and `ip6` families with a check-only transaction naming `table`-probe.
 * Throws {@link NoIPv4Error} when `ip` is refused.
 */
export async function nftFamilySupport(
  table: string,
  options: NftRunnerOptions = {},
): Promise<FamilySupport<NftFamily>> {
  return await probe<NftFamily>(["ip", "ip6"], async (family) => {
    const probe = `${family} ${table}-probe`;
    await checkNft(
      `add table ${probe}\n` +
        `add chain ${probe} nat { type nat hook prerouting priority dstnat; policy accept; }\n` +
        `add chain ${probe} filter { type filter hook forward priority -110; policy accept; }\n`,
      options,
    );
  });
}

/**
 * Probes `iptables-save -t nat` and `-t mangle` (the canary's table) of each family with the
 * back end (read-only). Throws {@link NoIPv4Error} when IPv4 is refused.
 */
export async function iptablesFamilySupport(
  options: IptablesRunnerOptions = {},
): Promise<FamilySupport<IPFamily>> {
  return await probe<IPFamily>(["IPv4", "IPv6"], async (family) => {
    const program = iptablesProgram("save", family, options.backend ?? "nft");
    for (const table of ["nat", "mangle"]) {
      const out = await runIptables([program, "-t", table], { ...options, timeoutMs: 10_000 });
      if (out.code !== 0) {
        throw new Error(out.stderr.trim() || `${program} -t ${table} exited with ${out.code}`);
      }
    }
  });
}

async function probe<F extends string>(
  families: readonly F[],
  check: (family: F) => Promise<void>,
): Promise<FamilySupport<F>> {
  const usable: F[] = [];
  const refused: { family: F; reason: string }[] = [];
  for (const family of families) {
    try {
      await check(family);
      usable.push(family);
    } catch (err) {
      const reason = (err as Error).message.split("\n")[0];
      if (family === families[0]) throw new NoIPv4Error(reason);
      refused.push({ family, reason });
    }
  }
  return { usable, refused };
}

/** The warning for a family left out. */
export function refusedWarning(family: string, reason: string): string {
  return `this kernel refuses ${family} rules (${reason}): proxying IPv4 only; ` +
    "IPv6 services get no rules on this node";
}
