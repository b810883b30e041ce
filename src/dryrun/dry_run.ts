/**
 * `--dry-run`: reads the kernel's tables (nft) or rules (`iptables-save`), diffs them against
 * the script the proxy would send, and formats the transaction that would bring them in line —
 * as an `nft -f` script (or `iptables-restore --noflush` input per family) with a summary in
 * comments, or as JSON.
 *
 * Nothing is written to the kernel. A table the kernel does not have is diffed as empty; when
 * the kernel cannot be read at all (no root, no nft), every table is diffed as empty and a
 * warning says why, so the command still shows the whole ruleset away from a node.
 *
 * @module
 */
import { type NftRunnerOptions, runNft } from "../apply/nft.ts";
import { type IptablesBackend, type IptablesRunnerOptions, saveTables } from "../apply/iptables.ts";
import { parseSave } from "../render/iptables/reconcile.ts";
import { splitSections } from "../render/iptables/script.ts";
import { diffIptablesSection, type IptablesFamilyDiff } from "./iptables_diff.ts";
import { diffTables, type DryRunDiff, type TableDiff } from "./table_diff.ts";
import {
  type TableImage,
  tablesFromListing,
  tablesFromScript,
  TableTextError,
} from "./table_image.ts";

/** How the diff is printed. */
export type DryRunOutput = "text" | "json";

/** The printed dry run and what went wrong reading the kernel, if anything. */
export interface DryRunReport {
  readonly diff: DryRunDiff;
  /** One line per table the kernel could not be asked about. */
  readonly warnings: readonly string[];
}

/**
 * Diffs the kernel's tables against `script` (the proxy's full-sync script for every family).
 * Throws {@link TableTextError}, naming the table and line, when a listing cannot be read.
 *
 * @example
 * ```ts
 * const report = await dryRunNft(script, { nftPath: "nft" });
 * console.log(formatDryRun(report.diff, "text"));
 * ```
 */
export async function dryRunNft(
  script: string,
  options: NftRunnerOptions = {},
): Promise<DryRunReport> {
  const wanted = tablesFromScript(script);
  const current = new Map<string, TableImage>();
  const warnings: string[] = [];
  // Both families' listings side by side: listing 100k elements takes nft seconds.
  const listings = await Promise.all(
    [...wanted].map(async ([id, t]) => ({ id, ...await listTable(t.family, t.name, options) })),
  );
  for (const listed of listings) {
    if (listed.table !== undefined) current.set(listed.id, listed.table);
    if (listed.warning !== undefined) warnings.push(listed.warning);
  }
  return { diff: diffTables(current, wanted), warnings };
}

async function listTable(
  family: string,
  name: string,
  options: NftRunnerOptions,
): Promise<{ table?: TableImage; warning?: string }> {
  let out;
  try {
    out = await runNft(["list", "table", family, name], options);
  } catch (err) {
    return { warning: `cannot run nft to read table ${family} ${name}: ${(err as Error).message}` };
  }
  if (out.code !== 0) {
    // nft 1.0.6 says "No such file or directory" for a missing table.
    if (/No such file or directory/.test(out.stderr)) return {};
    const why = out.stderr.trim().split("\n")[0] || `nft exited with ${out.code}`;
    return { warning: `cannot read table ${family} ${name} from the kernel (${why})` };
  }
  try {
    return { table: tablesFromListing(out.stdout).get(`${family} ${name}`) };
  } catch (err) {
    if (!(err instanceof TableTextError)) throw err;
    throw new TableTextError(`table ${family} ${name}: ${err.message}`);
  }
}

/**
 * The dry run as printed: `text` is an `nft -f` script (a summary in `#` comments, then the
 * commands; `# no change` when there are none), `json` one object with every table's state,
 * counts and commands, and the script.
 */
export function formatDryRun(diff: DryRunDiff, output: DryRunOutput): string {
  if (output === "json") return `${JSON.stringify(diff, null, 2)}\n`;
  const lines = diff.tables.map((t) => `# ${t.family} ${t.table}: ${describe(t)}`);
  if (diff.script === "") lines.push("# no change: the kernel's tables are what the proxy wants");
  return `${lines.join("\n")}\n${diff.script}`;
}

function describe(t: TableDiff): string {
  if (t.state === "unchanged") return "no change";
  const c = t.counts;
  const parts = [
    plural(c.elementsAdded, "element", "added"),
    plural(c.elementsDeleted, "element", "deleted"),
    plural(c.chainsAdded, "chain", "added"),
    plural(c.chainsRewritten, "chain", "rewritten"),
    plural(c.chainsDeleted, "chain", "deleted"),
    plural(c.setsAdded, "set or map", "added", "sets or maps"),
    plural(c.setsDeleted, "set or map", "deleted", "sets or maps"),
  ].filter((p) => p !== "");
  const head = t.state === "created"
    ? "not in the kernel; created"
    : t.state === "recreated"
    ? `deleted and recreated, because ${t.reason}`
    : "changed";
  return `${head}: ${parts.join(", ")}`;
}

function plural(n: number, one: string, verb: string, many = `${one}s`): string {
  return n === 0 ? "" : `${n} ${n === 1 ? one : many} ${verb}`;
}

/** The iptables-mode dry run: each family's diff, with the back end it was read from. */
export interface IptablesDryRunReport {
  readonly backend: IptablesBackend;
  readonly families: readonly IptablesFamilyDiff[];
  /** One line per family whose rules could not be read (then diffed as empty). */
  readonly warnings: readonly string[];
}

/**
 * Diffs the kernel's iptables rules (`iptables-save` of `backend`) against the iptables
 * planner's full-sync `script`, family by family.
 */
export async function dryRunIptables(
  script: string,
  options: IptablesRunnerOptions & { backend: IptablesBackend },
): Promise<IptablesDryRunReport> {
  const families: IptablesFamilyDiff[] = [];
  const warnings: string[] = [];
  for (const section of splitSections(script)) {
    let saved = parseSave("");
    try {
      saved = await saveTables(section.family, options);
    } catch (err) {
      warnings.push(`cannot read the ${section.family} rules (${(err as Error).message})`);
    }
    families.push(diffIptablesSection(section.family, section.text, saved));
  }
  return { backend: options.backend, families, warnings };
}

/**
 * The iptables dry run as printed: per family a `#` summary, then its `iptables-restore
 * --noflush` input (for `ip6tables-restore` in the IPv6 part); or JSON.
 */
export function formatIptablesDryRun(
  report: IptablesDryRunReport,
  output: DryRunOutput,
): string {
  if (output === "json") {
    return `${JSON.stringify({ backend: report.backend, families: report.families }, null, 2)}\n`;
  }
  const parts: string[] = [];
  for (const f of report.families) {
    const program = `${f.family === "IPv6" ? "ip6" : "ip"}tables-restore --noflush`;
    if (f.script === "") {
      parts.push(`# ${f.family} (iptables-${report.backend}): no change\n`);
      continue;
    }
    const said = [
      plural(f.chainsWritten.length, "chain", "written"),
      plural(f.chainsDeleted.length, "chain", "deleted"),
      plural(f.jumpsAdded, "jump rule", "added"),
    ].filter((p) => p !== "").join(", ");
    parts.push(
      `# ${f.family} (iptables-${report.backend}): ${said}; input for ${program}\n${f.script}`,
    );
  }
  return parts.join("");
}
