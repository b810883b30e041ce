/**
 * Noticing that someone removed or flushed our rules (`nft flush ruleset`, a firewall reload):
 * one cheap listing of the two dispatch chains per family, no bigger however many services.
 *
 * @module
 */
import { type NftRunnerOptions, runNft } from "./nft.ts";
import { NAMES } from "../render/nft/names.ts";

/**
 * True when both tables still dispatch packets: `nat-prerouting` jumps to `services` and
 * `services` looks up `service-ips`. False when the table, a chain or a rule is gone.
 */
export async function nftRulesIntact(
  table: string,
  options: NftRunnerOptions = {},
): Promise<boolean> {
  const families = ["ip", "ip6"];
  const script = families.flatMap((f) => [
    `list chain ${f} ${table} ${NAMES.natPrerouting}`,
    `list chain ${f} ${table} ${NAMES.services}`,
  ]).join("\n") + "\n";
  const out = await runNft(["-f", "-"], { ...options, stdin: script });
  if (out.code !== 0) return false;
  const jumps = out.stdout.match(new RegExp(`jump ${NAMES.services}\\b`, "g"))?.length ?? 0;
  const lookups = out.stdout.match(new RegExp(`vmap @${NAMES.serviceIPs}\\b`, "g"))?.length ?? 0;
  return jumps === families.length && lookups === families.length;
}
