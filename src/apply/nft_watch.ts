/**
 * Noticing that someone removed or flushed our rules (`nft flush ruleset`, a firewall reload),
 * at a cost that does not grow with the table: the two dispatch chains' rules read over netlink
 * ({@link nftRulesIntactNetlink}), or, where netlink cannot be used, one check-only `nft -c`
 * run that reads no set elements ({@link nftRulesIntact}).
 *
 * Every listing of a rule (`nft list chain`, `-t list table`, `nft monitor`) makes nft 1.x
 * fetch every set element of the table first: 1.4–2.3 s of CPU and 234 MB at 10k services ×
 * 10 endpoints (DESIGN §3). Check-only transactions are answered by the kernel without that
 * cache, so the check asks two questions the kernel answers for us, per family:
 *
 * - `insert rule … nat-prerouting index 0 …`: nft resolves "index 0" from that chain's rules
 *   only, so it fails with "No such file or directory" when the table, the chain or its
 *   rules are gone.
 * - `delete set … service-ips`: the kernel refuses it with "Device or resource busy" while a
 *   rule uses the map — the `services` chain's dispatch rule, the only one that does; so it
 *   succeeds (in a transaction that is thrown away) once that rule is flushed or deleted.
 *
 * Nothing is ever changed: `nft -c` sends the transaction without its commit. About 10 ms and
 * 5 MB for the whole check, at any table size.
 *
 * @module
 */
import { type NftRunnerOptions, runNft } from "./nft.ts";
import { dumpRules, netlinkOr } from "./nft_netlink.ts";
import { NAMES } from "../render/nft/names.ts";
import type { NftFamily } from "../render/nft/transaction.ts";

/** nft's message for an errno, as printed under `LC_ALL=C`. */
const ENOENT = "No such file or directory";
const EBUSY = "Device or resource busy";

/** A check waits at most this long for nft (it answers in ~10 ms). */
const CHECK_TIMEOUT_MS = 10_000;

/**
 * True when the tables of `families` (default both) still dispatch packets: `nat-prerouting`
 * holds its rule and `services` still looks up `service-ips`. False when a table, a chain or
 * one of those rules is gone. Throws when nft cannot answer (not installed, not permitted).
 *
 * @example
 * ```ts
 * if (!(await nftRulesIntact("kube-nftproxy"))) console.log("our rules were flushed");
 * ```
 */
export async function nftRulesIntact(
  table: string,
  options: NftRunnerOptions & { families?: readonly NftFamily[] } = {},
): Promise<boolean> {
  const families = options.families ?? ["ip", "ip6"];
  const script = rulesCheckScript(table, families);
  const result = await runNft(["-c", "-f", "-"], {
    ...options,
    stdin: script,
    env: { LC_ALL: "C" },
    timeoutMs: CHECK_TIMEOUT_MS,
  });
  return readRulesCheck(script, result.code, result.stderr);
}

/**
 * The same question asked over netlink, without any child: the kernel dumps the rules of
 * `nat-prerouting` and `services` (filtered to those chains, no set elements), and the check
 * looks for the jump to `services` and the lookup of `service-ips`. Microseconds at any size.
 * Throws {@link NetlinkError} with errno 0 where netlink cannot be used from here.
 */
export async function nftRulesIntactNetlink(
  table: string,
  families: readonly NftFamily[] = ["ip", "ip6"],
): Promise<boolean> {
  for (const family of families) {
    const prerouting = await dumpRules(family, table, NAMES.natPrerouting);
    if (!prerouting.some((rule) => rule.jumps.includes(NAMES.services))) return false;
    const services = await dumpRules(family, table, NAMES.services);
    if (!services.some((rule) => rule.lookups.includes(NAMES.serviceIPs))) return false;
  }
  return true;
}

/**
 * The daemon's rules check: over netlink ({@link nftRulesIntactNetlink}) in its own network
 * namespace, falling back for good to {@link nftRulesIntact} where FFI is not permitted or
 * libc is not there, and when nft runs in another namespace (`netns`, for tests).
 */
export function nftRulesChecker(
  table: string,
  options: NftRunnerOptions & { families?: readonly NftFamily[] } = {},
): () => Promise<boolean> {
  const viaNft = () => nftRulesIntact(table, options);
  if (options.netns !== undefined) return viaNft;
  return netlinkOr(() => nftRulesIntactNetlink(table, options.families), viaNft);
}

/**
 * The check-only script of {@link nftRulesIntact}: per family, on odd lines the probe of
 * `nat-prerouting`'s rules, on even lines the probe of the map the `services` chain uses.
 */
export function rulesCheckScript(table: string, families: readonly NftFamily[]): string {
  return families.map((family) =>
    `insert rule ${family} ${table} ${NAMES.natPrerouting} index 0 counter\n` +
    `delete map ${family} ${table} ${NAMES.serviceIPs}\n`
  ).join("");
}

/**
 * Reads nft's answer to {@link rulesCheckScript}: intact when no probe of a chain failed and
 * every map is busy. A failed probe stops nft before it asks the kernel anything, so any
 * missing chain or rule decides alone; any other refusal (permissions, a broken nft) throws.
 */
export function readRulesCheck(script: string, code: number, stderr: string): boolean {
  const lines = script.trimEnd().split("\n");
  const errors = new Map<number, string>();
  for (const match of stderr.matchAll(/^[^\n]*?:(\d+):\d+(?:-\d+)?: Error: ([^\n]*)$/gm)) {
    errors.set(Number(match[1]), match[2]);
  }
  if (code !== 0 && errors.size === 0) {
    throw new Error(`nft -c answered with exit code ${code}: ${firstLine(stderr)}`);
  }
  const unexpected = [...errors].find(([, message]) =>
    !message.includes(ENOENT) && !message.includes(EBUSY)
  );
  if (unexpected !== undefined) {
    throw new Error(`nft -c refused line ${unexpected[0]}: ${unexpected[1]}`);
  }
  for (let line = 1; line <= lines.length; line += 2) {
    if (errors.has(line)) return false;
  }
  for (let line = 2; line <= lines.length; line += 2) {
    if (!errors.get(line)?.includes(EBUSY)) return false;
  }
  return true;
}

function firstLine(text: string): string {
  return text.trim().split("\n")[0] ?? "";
}
