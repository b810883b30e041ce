/**
 * The text the iptables planner hands to the applier: one `iptables-restore` section per family,
 * each opened by a comment line naming the family and whether it is a full sync.
 *
 * ```
 * # kube-nftproxy IPv4 full sync
 * *filter
 * :KUBE-SERVICES - [0:0]
 * …
 * COMMIT
 * *nat
 * …
 * COMMIT
 * # kube-nftproxy IPv6 partial sync
 * *nat
 * …
 * ```
 *
 * A section is valid `iptables-restore --noflush` input by itself (the header is a comment), so
 * the applier feeds each one to `iptables-restore` or `ip6tables-restore` unchanged and a
 * `--dry-run` print shows exactly what the kernel would get. No JSON, no escaping: the
 * planner's {@link Plan} stays a string, as the sync loop expects.
 *
 * @module
 */
import type { IPFamily } from "../../model/service_port.ts";
import type { Table } from "./names.ts";

/** One family's part of a script. */
export interface FamilySection {
  readonly family: IPFamily;
  /** A full sync: the applier also reconciles jump rules and leftover chains. */
  readonly full: boolean;
  /** The whole section, header line included: `iptables-restore` input. */
  readonly text: string;
}

const HEADER = /^# kube-nftproxy (IPv4|IPv6) (full|partial) sync$/;

/** The header line opening a family's section. */
export function sectionHeader(family: IPFamily, full: boolean): string {
  return `# kube-nftproxy ${family} ${full ? "full" : "partial"} sync`;
}

/** Splits a planned script into its family sections (text before the first header is ignored). */
export function splitSections(script: string): FamilySection[] {
  const sections: { family: IPFamily; full: boolean; lines: string[] }[] = [];
  for (const line of script.split("\n")) {
    const header = HEADER.exec(line);
    if (header) {
      sections.push({ family: header[1] as IPFamily, full: header[2] === "full", lines: [] });
    }
    sections.at(-1)?.lines.push(line);
  }
  return sections.map((s) => ({
    family: s.family,
    full: s.full,
    text: s.lines.join("\n").replace(/\n*$/, "\n"),
  }));
}

/** One table's part of a section: chains to declare (flush or create), rule lines, trailer. */
export interface TableSection {
  /** Mangle only for the empty `KUBE-PROXY-CANARY` chain. */
  readonly table: Table | "mangle";
  /** Chains declared with `:NAME - [0:0]`: created, or flushed when they exist. */
  readonly declare: readonly string[];
  /** `-A`, `-I`, `-D` lines, in order. */
  readonly rules: readonly string[];
  /** Lines after the rules (`-X NAME` of deleted chains). */
  readonly trailer?: readonly string[];
}

/** Renders one table's part of a section (`*table` … `COMMIT`), or "" when it has no lines. */
export function renderTable(section: TableSection): string {
  const trailer = section.trailer ?? [];
  if (section.declare.length + section.rules.length + trailer.length === 0) return "";
  const lines = [`*${section.table}`];
  for (const chain of section.declare) lines.push(`:${chain} - [0:0]`);
  for (const rule of section.rules) lines.push(rule);
  for (const line of trailer) lines.push(line);
  lines.push("COMMIT", "");
  return lines.join("\n");
}
