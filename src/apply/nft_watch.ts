/**
 * Noticing that someone removed or flushed our rules (`nft flush ruleset`, a firewall reload):
 * one cheap listing of the two dispatch chains per family, no bigger however many services.
 *
 * @module
 */
import { type NftRunnerOptions, runNft } from "./nft.ts";
import { NAMES } from "../render/nft/names.ts";
import type { NftFamily } from "../render/nft/transaction.ts";

/**
 * True when the tables of `families` (default both) still dispatch packets: `nat-prerouting`
 * jumps to `services` and `services` looks up `service-ips`. False when a table, a chain or a
 * rule is gone.
 *
 * One `nft list chain` per chain, run side by side: nft 1.0.6 answers a file of several `list
 * chain` commands with "No such file or directory" even when every chain exists (its cache is
 * filtered for one of them only).
 */
export async function nftRulesIntact(
  table: string,
  options: NftRunnerOptions & { families?: readonly NftFamily[] } = {},
): Promise<boolean> {
  const families = options.families ?? ["ip", "ip6"];
  const wanted: [NftFamily, string, RegExp][] = families.flatMap((
    f,
  ): [NftFamily, string, RegExp][] => [
    [f, NAMES.natPrerouting, new RegExp(`jump ${NAMES.services}\\b`)],
    [f, NAMES.services, new RegExp(`vmap @${NAMES.serviceIPs}\\b`)],
  ]);
  const found = await Promise.all(wanted.map(async ([family, chain, rule]) => {
    const out = await runNft(["list", "chain", family, table, chain], options);
    return out.code === 0 && rule.test(out.stdout);
  }));
  return found.every(Boolean);
}
