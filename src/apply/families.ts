/**
 * Probing which IP families this node's kernel lets the proxy program (each mode's probe, built on
 * {@link probeFamilies}, lives beside its runner: `nftFamilySupport` in nft.ts,
 * `iptablesFamilySupport` in iptables.ts). A host booted with
 * `ipv6.disable=1`, or a kernel built without IPv6 NAT, refuses every `ip6` table (or
 * `ip6tables` nat table); since a sync is one transaction, one refused family would fail every
 * sync and leave IPv4 services unprogrammed too. Asked once at start-up, like upstream
 * kube-proxy does: each family is probed without changing anything (`nft -c` of a table with
 * a nat and a filter base chain; `ip6tables-save -t nat` and `-t mangle`), and a family the
 * kernel refuses is left out with a warning. Without IPv4 there is nothing to proxy.
 *
 * @module
 */

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
 * Asks the kernel about each family in turn with `check` (which throws the kernel's answer
 * when it refuses one). Throws {@link NoIPv4Error} when the first family (IPv4) is refused.
 */
export async function probeFamilies<F extends string>(
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

/** The warning for a family left out, naming it as the mode does (`ip6`, `IPv6`). */
export function refusedWarning(family: string, reason: string): string {
  return `this kernel refuses ${family} rules (${reason}): proxying IPv4 only; ` +
    "IPv6 services get no rules on this node";
}
