/**
 * What only the kernel's current rules can tell, as pure functions of `iptables-save` output:
 * which of our jump rules in the built-in chains are missing, which per-service chains an
 * earlier process left behind, and the script that removes everything this proxy created
 * (cleanup and mode switching) and nothing else.
 *
 * Our jump rules are upstream kube-proxy's (same chains, matches and comments), recognised by
 * chain, target and comment, so rules an upstream kube-proxy left are adopted rather than
 * duplicated. Nothing here ever flushes a built-in chain: a foreign rule in PREROUTING, or a
 * foreign chain, is never named in a script — except a foreign rule's jump target, which is
 * then kept (never flushed or deleted) so the restore cannot fail on it.
 *
 * @module
 */
import { CANARY, FIXED_CHAINS, isServiceChainName, type Table } from "./names.ts";

/** One of our jump rules from a built-in chain into a KUBE-* chain. */
export interface JumpRule {
  readonly table: Table;
  /** The built-in chain. */
  readonly chain: string;
  /** Our chain it jumps to. */
  readonly target: string;
  readonly comment: string;
  /** Only for new connections (`-m conntrack --ctstate NEW`). */
  readonly newOnly: boolean;
}

const rule = (
  table: Table,
  chain: string,
  target: string,
  comment: string,
  newOnly = false,
): JumpRule => ({ table, chain, target, comment, newOnly });

/**
 * Our jump rules, in upstream's order (`iptablesJumpChains`); each is inserted at the top of its
 * chain when missing, so the last one ends up first, as with upstream's `EnsureRule(Prepend)`.
 */
export const JUMP_RULES: readonly JumpRule[] = [
  rule(
    "filter",
    "INPUT",
    "KUBE-EXTERNAL-SERVICES",
    "kubernetes externally-visible service portals",
    true,
  ),
  rule(
    "filter",
    "FORWARD",
    "KUBE-EXTERNAL-SERVICES",
    "kubernetes externally-visible service portals",
    true,
  ),
  rule("filter", "INPUT", "KUBE-NODEPORTS", "kubernetes health check service ports"),
  rule("filter", "FORWARD", "KUBE-SERVICES", "kubernetes service portals", true),
  rule("filter", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals", true),
  rule("filter", "FORWARD", "KUBE-FORWARD", "kubernetes forwarding rules"),
  rule("filter", "INPUT", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", true),
  rule("filter", "OUTPUT", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", true),
  rule("filter", "FORWARD", "KUBE-PROXY-FIREWALL", "kubernetes load balancer firewall", true),
  rule("nat", "OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
  rule("nat", "PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
  rule("nat", "POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"),
];

/** The rule specification of a jump rule, as `iptables-save` prints it. */
export function jumpRuleSpec(jump: JumpRule): string {
  const state = jump.newOnly ? "-m conntrack --ctstate NEW " : "";
  return `${state}-m comment --comment "${jump.comment}" -j ${jump.target}`;
}

/** One table of `iptables-save` output. */
export interface SavedTable {
  /** Every chain, built-in or not. */
  readonly chains: ReadonlySet<string>;
  /** Every rule: its chain, its words (quotes removed) and its text after `-A CHAIN `. */
  readonly rules: readonly SavedRule[];
}

/** One rule of `iptables-save` output. */
export interface SavedRule {
  readonly chain: string;
  readonly words: readonly string[];
  /** The specification, exactly as printed (for `-D CHAIN <spec>`). */
  readonly spec: string;
}

/** `iptables-save` output split into tables (absent tables are empty; mangle for the canary). */
export type SavedTables = Readonly<Record<Table | "mangle", SavedTable>>;

const EMPTY: SavedTable = { chains: new Set(), rules: [] };

/** Parses `iptables-save` output (any number of tables; only filter, nat and mangle are kept). */
export function parseSave(text: string): SavedTables {
  const tables: Record<string, { chains: Set<string>; rules: SavedRule[] }> = {};
  let current: { chains: Set<string>; rules: SavedRule[] } | undefined;
  for (const line of text.split("\n")) {
    if (line.startsWith("*")) {
      current = tables[line.slice(1).trim()] ??= { chains: new Set(), rules: [] };
    } else if (current === undefined) {
      continue;
    } else if (line.startsWith(":")) {
      current.chains.add(line.slice(1).split(" ")[0]);
    } else if (line.startsWith("-A ")) {
      current.rules.push(parseRule(line));
    }
  }
  return {
    filter: tables.filter ?? EMPTY,
    nat: tables.nat ?? EMPTY,
    mangle: tables.mangle ?? EMPTY,
  };
}

/** One `-A CHAIN …` line of `iptables-save` or `iptables -S`. */
function parseRule(line: string): SavedRule {
  const rest = line.slice(3);
  const space = rest.indexOf(" ");
  const chain = space < 0 ? rest : rest.slice(0, space);
  const spec = space < 0 ? "" : rest.slice(space + 1);
  return { chain, spec, words: splitWords(spec) };
}

/**
 * True when the output of `iptables -t TABLE -S CHAIN` (or any `-A …` lines) holds this jump
 * rule: same chain, target and comment, wherever it stands.
 */
export function listingHasJump(listing: string, jump: JumpRule): boolean {
  return listing.split("\n").some((line) =>
    line.startsWith(`-A ${jump.chain} `) && isJump(parseRule(line), jump)
  );
}

/** Splits a rule specification into words, honouring iptables-save's double quotes. */
export function splitWords(spec: string): string[] {
  const words: string[] = [];
  let word = "";
  let inWord = false;
  let quoted = false;
  for (let i = 0; i < spec.length; i++) {
    const c = spec[i];
    if (quoted) {
      if (c === "\\" && i + 1 < spec.length) word += spec[++i];
      else if (c === '"') quoted = false;
      else word += c;
    } else if (c === '"') {
      quoted = inWord = true;
    } else if (c === " ") {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

/** The chain a rule jumps or goes to, if any. */
export function targetOf(rule: SavedRule): string | undefined {
  const i = rule.words.findIndex((w) =>
    w === "-j" || w === "-g" || w === "--jump" || w === "--goto"
  );
  return i < 0 ? undefined : rule.words[i + 1];
}

/** True when a saved rule is this jump rule (same chain, target and comment). */
function isJump(rule: SavedRule, jump: JumpRule): boolean {
  if (rule.chain !== jump.chain || targetOf(rule) !== jump.target) return false;
  const i = rule.words.indexOf("--comment");
  return i >= 0 && rule.words[i + 1] === jump.comment;
}

/** Our jump rules missing from the saved tables, in {@link JUMP_RULES} order. */
export function missingJumps(saved: SavedTables): JumpRule[] {
  return JUMP_RULES.filter((jump) => !saved[jump.table].rules.some((r) => isJump(r, jump)));
}

/** What a full-sync section of one family needs from the kernel's current rules. */
export interface Reconciliation {
  /** `-I` of each missing jump rule, per table, to run right after the declarations. */
  readonly first: Readonly<Record<Table, readonly string[]>>;
  /**
   * Given the nat chains the section declares: per-service chains an earlier process left that
   * can be deleted (no foreign rule jumps to them, nor to a stale chain kept for one).
   */
  stale(declared: ReadonlySet<string>): string[];
}

/** The {@link Reconciliation} of one family's saved tables. */
export function reconciliation(saved: SavedTables): Reconciliation {
  const first: Record<Table, string[]> = { filter: [], nat: [] };
  for (const jump of missingJumps(saved)) {
    first[jump.table].push(`-I ${jump.chain} ${jumpRuleSpec(jump)}`);
  }
  return {
    first,
    stale: (declared) => {
      const stale = [...saved.nat.chains].filter((c) => isServiceChainName(c) && !declared.has(c));
      const foreignTargets = referencedFrom(
        saved.nat,
        (chain) => !declared.has(chain) && !isServiceChainName(chain),
      );
      const deletable = new Set(stale.filter((c) => !foreignTargets.has(c)));
      // A stale chain kept for a foreign rule keeps the stale chains it jumps to.
      for (const kept of stale.filter((c) => !deletable.has(c))) {
        for (const r of saved.nat.rules) if (r.chain === kept) deletable.delete(targetOf(r) ?? "");
      }
      return [...deletable];
    },
  };
}

/**
 * Completes a full-sync restore section of one family with what the kernel's current rules
 * call for: `-I` of every missing jump rule, and flush + `-X` of every per-service chain left
 * by an earlier process that the section does not declare (unless a foreign rule jumps to it).
 * (The applier does the same while streaming a planned section: see {@link reconciliation}.)
 */
export function reconcileSection(section: string, saved: SavedTables): string {
  const declared = declaredChains(section);
  const { first, stale } = reconciliation(saved);
  const drop = stale(declared.nat);
  let result = section;
  for (const table of ["filter", "nat"] as const) {
    const lines = first[table];
    const dropped = table === "nat" ? drop : [];
    result = insertIntoTable(result, table, {
      declare: dropped,
      first: lines,
      last: dropped.map((c) => `-X ${c}`),
    });
  }
  return result;
}

/**
 * The restore input that removes everything this proxy created from one family's tables: our
 * jump rules (deleted by their exact saved specification) and our chains (flushed, then
 * deleted), the canary chains of filter, nat and mangle included. A chain a foreign rule jumps
 * to is left as it is, with everything it jumps to. Returns "" when there is nothing of ours.
 */
export function cleanupScript(saved: SavedTables): string {
  let script = "";
  for (const table of ["filter", "nat", "mangle"] as const) {
    const t = saved[table];
    const fixed: readonly string[] = table === "mangle" ? [CANARY] : FIXED_CHAINS[table];
    const ours = new Set(
      [...t.chains].filter((c) => fixed.includes(c) || (table === "nat" && isServiceChainName(c))),
    );
    const jumps = t.rules.filter((r) => JUMP_RULES.some((j) => j.table === table && isJump(r, j)));
    const keep = referencedFrom(
      { chains: t.chains, rules: t.rules.filter((r) => !jumps.includes(r)) },
      (chain) => !ours.has(chain),
    );
    for (let grew = true; grew;) {
      grew = false;
      for (const r of t.rules) {
        const target = targetOf(r);
        if (keep.has(r.chain) && target !== undefined && ours.has(target) && !keep.has(target)) {
          keep.add(target);
          grew = true;
        }
      }
    }
    const remove = [...ours].filter((c) => !keep.has(c));
    if (remove.length + jumps.length === 0) continue;
    script += chainRemovalSection(table, remove, jumps);
  }
  return script;
}

/**
 * One table's restore section that deletes the `jumps` (by their saved specification), then
 * flushes and deletes the `chains` (declaring a chain flushes it, so `-X` finds it empty).
 */
export function chainRemovalSection(
  table: string,
  chains: readonly string[],
  jumps: readonly SavedRule[],
): string {
  const lines = [`*${table}`];
  for (const chain of chains) lines.push(`:${chain} - [0:0]`);
  for (const r of jumps) lines.push(`-D ${r.chain} ${r.spec}`);
  for (const chain of chains) lines.push(`-X ${chain}`);
  lines.push("COMMIT", "");
  return lines.join("\n");
}

/** Chains jumped to by rules of the chains `from` accepts. */
function referencedFrom(table: SavedTable, from: (chain: string) => boolean): Set<string> {
  const targets = new Set<string>();
  for (const r of table.rules) {
    if (!from(r.chain)) continue;
    const target = targetOf(r);
    if (target !== undefined) targets.add(target);
  }
  return targets;
}

/** Chains a restore section declares (`:NAME …`), per table. */
function declaredChains(section: string): Record<Table, Set<string>> {
  const declared: Record<Table, Set<string>> = { filter: new Set(), nat: new Set() };
  let table: Table | undefined;
  for (const line of section.split("\n")) {
    if (line === "*filter" || line === "*nat") table = line.slice(1) as Table;
    else if (line.startsWith("*")) table = undefined;
    else if (table !== undefined && line.startsWith(":")) {
      declared[table].add(line.slice(1).split(" ")[0]);
    }
  }
  return declared;
}

/**
 * Adds to one table's part of a section: chain declarations and lines to run first (right
 * after the part's own declarations) and lines to run last (right before its `COMMIT`),
 * creating that part when the section has none.
 */
function insertIntoTable(
  section: string,
  table: Table,
  add: { declare: readonly string[]; first: readonly string[]; last: readonly string[] },
): string {
  if (add.declare.length + add.first.length + add.last.length === 0) return section;
  const declarations = add.declare.map((c) => `:${c} - [0:0]`);
  const all = section.replace(/\n*$/, "").split("\n");
  const start = all.indexOf(`*${table}`);
  if (start < 0) {
    return [...all, `*${table}`, ...declarations, ...add.first, ...add.last, "COMMIT", ""]
      .join("\n");
  }
  const commit = all.indexOf("COMMIT", start);
  all.splice(commit, 0, ...add.last);
  let body = start + 1;
  while (all[body].startsWith(":")) body++;
  all.splice(body, 0, ...declarations, ...add.first);
  return [...all, ""].join("\n");
}
