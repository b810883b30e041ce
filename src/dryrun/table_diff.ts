/**
 * The dry-run diff: the one transaction that brings the kernel's tables (as listed) to the
 * tables the proxy wants (as its script would leave them), as `nft -f` text and as data.
 *
 * Only what differs is touched, in the order a partial sync uses: new sets and chains first,
 * then rewritten chains (flushed and refilled), removed elements, added elements (a changed
 * element is removed and added), and last the chains and sets nothing refers to any more. The
 * elements of dynamic sets belong to the packet path and are left alone. Where a set's or a
 * base chain's definition changed — which nft cannot alter in place — the table is deleted and
 * recreated in the same transaction, as the proxy's first sync does. Pure: no I/O.
 *
 * @module
 */
import { ELEMENTS_PER_COMMAND } from "../render/nft/transaction.ts";
import { type ChainImage, type SetImage, tableId, type TableImage } from "./table_image.ts";

/** One command of the transaction. */
export interface DiffCommand {
  readonly op: "add" | "delete" | "flush";
  readonly object: "table" | "set" | "map" | "chain" | "rule" | "element";
  readonly family: string;
  readonly table: string;
  /** The set, map or chain (empty for a table command). */
  readonly name: string;
  /** The rule (rule commands) or the elements (element commands), as `nft` reads them. */
  readonly items?: readonly string[];
  /** The command as one line of the script. */
  readonly text: string;
}

/** What the transaction does to one table. */
export interface TableDiff {
  readonly family: string;
  readonly table: string;
  /** `unchanged`, `changed`, `created` (no table yet) or `recreated` (see {@link reason}). */
  readonly state: "unchanged" | "changed" | "created" | "recreated";
  /** Why the table is recreated rather than changed in place. */
  readonly reason?: string;
  readonly counts: DiffCounts;
  readonly commands: readonly DiffCommand[];
}

/** How many objects a table's commands add, rewrite or remove. */
export interface DiffCounts {
  setsAdded: number;
  setsDeleted: number;
  chainsAdded: number;
  chainsRewritten: number;
  chainsDeleted: number;
  elementsAdded: number;
  elementsDeleted: number;
}

/** The whole dry run: every wanted table's diff. */
export interface DryRunDiff {
  readonly tables: readonly TableDiff[];
  /** The transaction for `nft -f` (empty when nothing changes). */
  readonly script: string;
}

/**
 * Diffs every wanted table against the kernel's (absent: created). Tables the kernel has but
 * the proxy does not want are not touched (they belong to someone else).
 *
 * @example
 * ```ts
 * const diff = diffTables(tablesFromListing(listing), tablesFromScript(script));
 * console.log(diff.script || "# no change");
 * ```
 */
export function diffTables(
  current: ReadonlyMap<string, TableImage>,
  wanted: ReadonlyMap<string, TableImage>,
): DryRunDiff {
  const tables = [...wanted.values()].map((table) =>
    diffTable(current.get(tableId(table.family, table.name)), table)
  );
  return {
    tables,
    script: tables.flatMap((t) => t.commands.map((c) => `${c.text}\n`)).join(""),
  };
}

/** The diff of one table; `current` undefined means the kernel has no such table. */
export function diffTable(current: TableImage | undefined, wanted: TableImage): TableDiff {
  const out = new Commands(wanted);
  if (current === undefined) {
    out.addTable();
    createContents(out, wanted);
    return out.result("created");
  }
  const reason = redefinition(current, wanted);
  if (reason !== undefined) {
    out.addTable();
    out.push({ op: "delete", object: "table", name: "" }, "");
    out.addTable();
    createContents(out, wanted);
    return out.result("recreated", reason);
  }
  for (const set of wanted.sets.values()) {
    if (!current.sets.has(set.name)) out.addSet(set);
  }
  const rewritten: ChainImage[] = [];
  for (const chain of wanted.chains.values()) {
    const before = current.chains.get(chain.name);
    if (before === undefined) {
      out.addChain(chain);
      out.counts.chainsAdded++;
      rewritten.push(chain);
    } else if (!sameRules(before, chain)) {
      out.push({ op: "flush", object: "chain", name: chain.name }, "");
      out.counts.chainsRewritten++;
      rewritten.push(chain);
    }
  }
  rewritten.forEach((chain) => out.addRules(chain));
  const additions: [SetImage, string[]][] = [];
  for (const set of wanted.sets.values()) {
    const before = current.sets.get(set.name);
    if (set.dynamic) continue;
    const removed: string[] = [];
    const added: string[] = [];
    for (const [key, element] of before?.elements ?? []) {
      if (set.elements.get(key)?.same !== element.same) removed.push(element.keyText);
    }
    for (const [key, element] of set.elements) {
      if (before?.elements.get(key)?.same !== element.same) added.push(element.text);
    }
    out.elements("delete", set, removed);
    additions.push([set, added]);
  }
  for (const [set, added] of additions) out.elements("add", set, added);
  const gone = [...current.chains.values()].filter((c) => !wanted.chains.has(c.name));
  for (const chain of gone) out.push({ op: "flush", object: "chain", name: chain.name }, "");
  for (const chain of gone) out.push({ op: "delete", object: "chain", name: chain.name }, "");
  out.counts.chainsDeleted = gone.length;
  for (const set of current.sets.values()) {
    if (wanted.sets.has(set.name)) continue;
    out.push({ op: "delete", object: set.kind, name: set.name }, "");
    out.counts.setsDeleted++;
  }
  return out.result(out.size === 0 ? "unchanged" : "changed");
}

/** Why the table cannot be changed in place: a set's or a base chain's definition changed. */
function redefinition(current: TableImage, wanted: TableImage): string | undefined {
  for (const set of wanted.sets.values()) {
    const before = current.sets.get(set.name);
    if (before !== undefined && before.same !== set.same) {
      return `${set.kind} ${set.name} changes its definition from "${before.spec}" to "${set.spec}"`;
    }
  }
  for (const chain of wanted.chains.values()) {
    const before = current.chains.get(chain.name);
    if (before !== undefined && before.same !== chain.same) {
      return `chain ${chain.name} changes its definition from "${before.spec}" to "${chain.spec}"`;
    }
  }
  return undefined;
}

/** Every set, chain, rule and element of `table`, in the order the proxy creates them. */
function createContents(out: Commands, table: TableImage): void {
  for (const set of table.sets.values()) out.addSet(set);
  for (const chain of table.chains.values()) out.addChain(chain);
  out.counts.chainsAdded = table.chains.size;
  for (const chain of table.chains.values()) out.addRules(chain);
  for (const set of table.sets.values()) {
    if (!set.dynamic) out.elements("add", set, [...set.elements.values()].map((e) => e.text));
  }
}

function sameRules(a: ChainImage, b: ChainImage): boolean {
  return a.rules.length === b.rules.length && a.rules.every((r, i) => r.same === b.rules[i].same);
}

/** The commands of one table's diff, with their counts. */
class Commands {
  readonly #table: TableImage;
  readonly #prefix: string;
  readonly #commands: DiffCommand[] = [];
  readonly counts: DiffCounts = {
    setsAdded: 0,
    setsDeleted: 0,
    chainsAdded: 0,
    chainsRewritten: 0,
    chainsDeleted: 0,
    elementsAdded: 0,
    elementsDeleted: 0,
  };

  constructor(table: TableImage) {
    this.#table = table;
    this.#prefix = `${table.family} ${table.name}`;
  }

  get size(): number {
    return this.#commands.length;
  }

  push(
    command: Pick<DiffCommand, "op" | "object" | "name" | "items">,
    rest: string,
  ): void {
    const target = command.name === "" ? "" : ` ${command.name}`;
    this.#commands.push({
      ...command,
      family: this.#table.family,
      table: this.#table.name,
      text: `${command.op} ${command.object} ${this.#prefix}${target}${rest}`,
    });
  }

  addTable(): void {
    const comment = this.#table.comment;
    this.push(
      { op: "add", object: "table", name: "" },
      comment ? ` { comment "${comment}"; }` : "",
    );
  }

  addSet(set: SetImage): void {
    this.push({ op: "add", object: set.kind, name: set.name }, ` { ${set.spec} }`);
    this.counts.setsAdded++;
  }

  addChain(chain: ChainImage): void {
    this.push(
      { op: "add", object: "chain", name: chain.name },
      chain.spec ? ` { ${chain.spec} }` : "",
    );
  }

  addRules(chain: ChainImage): void {
    for (const rule of chain.rules) {
      this.push(
        { op: "add", object: "rule", name: chain.name, items: [rule.text] },
        ` ${rule.text}`,
      );
    }
  }

  elements(op: "add" | "delete", set: SetImage, items: readonly string[]): void {
    for (let i = 0; i < items.length; i += ELEMENTS_PER_COMMAND) {
      const batch = items.slice(i, i + ELEMENTS_PER_COMMAND);
      this.push(
        { op, object: "element", name: set.name, items: batch },
        ` { ${batch.join(", ")} }`,
      );
    }
    if (op === "add") this.counts.elementsAdded += items.length;
    else this.counts.elementsDeleted += items.length;
  }

  result(state: TableDiff["state"], reason?: string): TableDiff {
    return {
      family: this.#table.family,
      table: this.#table.name,
      state,
      ...(reason === undefined ? {} : { reason }),
      counts: this.counts,
      commands: this.#commands,
    };
  }
}
