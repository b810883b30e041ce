/**
 * `explain --live`: whether the node's kernel holds the rules an explanation was computed from,
 * for the packet explained. The dry-run diff between the kernel's tables and the wanted ones
 * is narrowed to what this packet meets — elements keyed by its entry point
 * (`address . protocol . port`, or `protocol . port` for a node port) and the chains on its
 * path. Pure: the diff is computed by the caller.
 *
 * @module
 */
import type { DryRunDiff } from "../dryrun/table_diff.ts";
import type { Explanation, PacketQuery } from "./explain.ts";

/** How the kernel compares with the explained rules. */
export interface KernelAgreement {
  /** The kernel's tables are exactly the wanted ones. */
  readonly matches: boolean;
  /** Nothing that differs concerns this packet: the explanation holds for the live rules. */
  readonly packetMatches: boolean;
  /** Commands of the diff that concern this packet (at most {@link MAX_SHOWN}). */
  readonly differences: readonly string[];
  /** Commands in the whole diff. */
  readonly commands: number;
}

/** Most differences listed. */
export const MAX_SHOWN = 20;

/**
 * The part of `diff` (kernel → wanted) that concerns the packet of `query`, whose explanation
 * is `explanation` (its entry into the node and chain path). The diff's element commands name
 * protocols as our scripts do (`tcp`), whether or not the node's nft printed numbers.
 */
export function kernelAgreement(
  diff: DryRunDiff,
  query: PacketQuery,
  explanation: Pick<Explanation, "toNode" | "path">,
): KernelAgreement {
  const { address, protocol, port } = query.to;
  const keys = [`${address} . ${protocol} . ${port}`];
  if (explanation.toNode) keys.push(`${protocol} . ${port}`);
  const concerns = (item: string) => keys.some((k) => item === k || item.startsWith(`${k} `));
  const chains = new Set(explanation.path);
  const commands = diff.tables.flatMap((t) => t.commands);
  const relevant = commands.filter((c) =>
    c.object === "element"
      ? (c.items ?? []).some(concerns)
      : (c.object === "chain" || c.object === "rule") && chains.has(c.name)
  );
  return {
    matches: commands.length === 0,
    packetMatches: relevant.length === 0,
    differences: relevant.slice(0, MAX_SHOWN).map((c) => narrow(c.text, c.items, concerns)),
    commands: commands.length,
  };
}

/** An element command cut down to the elements that concern the packet. */
function narrow(
  text: string,
  items: readonly string[] | undefined,
  concerns: (item: string) => boolean,
): string {
  if (items === undefined || !text.includes(" element ")) return text;
  const head = text.slice(0, text.indexOf("{"));
  return `${head}{ ${items.filter(concerns).join(", ")} }`;
}

/** The text form: one `kernel:` line, then the differing commands indented. */
export function formatAgreement(a: KernelAgreement): string {
  if (a.matches) return "kernel:      the live rules are these (nothing to change)";
  if (a.packetMatches) {
    return `kernel:      the live rules agree for this packet (${a.commands} commands would ` +
      "change others; see --dry-run)";
  }
  return [
    "kernel:      the live rules DIFFER for this packet: the proxy has not synced this yet, or " +
    "someone changed them; a sync would send:",
    ...a.differences.map((line) => `  ${line}`),
  ].join("\n");
}
