/**
 * The nft transaction builder: typed tables, chains, sets, maps and elements in, the exact
 * `nft -f` script text out.
 *
 * Rule bodies are plain nft syntax (paste-able into `nft add rule`); everything else is typed.
 * Element lists are split into several `add element` commands so no single command grows
 * unboundedly; all commands still form one transaction.
 *
 * @module
 */
import type { IPFamily } from "../../model/service_port.ts";

/** The nft families this proxy programs. */
export type NftFamily = "ip" | "ip6";

/** The IP family an nft family programs. */
export function ipFamilyOf(family: NftFamily): IPFamily {
  return family === "ip" ? "IPv4" : "IPv6";
}

/** The nft family that programs an IP family. */
export function nftFamilyOf(family: IPFamily): NftFamily {
  return family === "IPv4" ? "ip" : "ip6";
}

/** A base chain's hook. */
export interface Hook {
  readonly type: "filter" | "nat";
  readonly hook: "prerouting" | "input" | "forward" | "output" | "postrouting";
  /** A number or a standard priority name (`dstnat`, `srcnat`, `filter`). */
  readonly priority: number | string;
}

/** A chain; base chains have a hook. */
export interface ChainDef {
  readonly name: string;
  readonly hook?: Hook;
  readonly comment?: string;
}

/** A named set or map. `type` is nft syntax after `type`/`typeof` (e.g. `ipv4_addr`). */
export interface SetDef {
  readonly kind: "set" | "map";
  readonly name: string;
  /** Either `type …` or `typeof …`, written out in full. */
  readonly type: string;
  readonly flags?: readonly string[];
  /** Default element timeout, e.g. for ClientIP affinity sets. */
  readonly timeoutSeconds?: number;
  /** Largest number of elements (nft's default for dynamic sets is 65535). */
  readonly size?: number;
  /** Filled by the packet path (e.g. `update @set`): never flushed by a re-sync. */
  readonly dynamic?: boolean;
  readonly comment?: string;
}

/** One element of a set (key only) or map (key and value). */
export interface ElementDef {
  readonly set: string;
  readonly key: string;
  readonly value?: string;
  readonly comment?: string;
}

/** `count` formatted elements (`key comment "…" : value`) joined by `, `. */
export interface ElementRun {
  readonly text: string;
  readonly count: number;
}

/** How many elements go into one `add element` command. */
export const ELEMENTS_PER_COMMAND = 1000;

/** Accumulates the commands of one transaction for one table. */
export class Transaction {
  /** The script's text in pieces, joined once (each command ends in a newline). */
  readonly #parts: string[] = [];
  #commands = 0;
  readonly #prefix: string;

  constructor(family: NftFamily, table: string) {
    this.#prefix = `${family} ${table}`;
  }

  /** Number of commands so far. */
  get size(): number {
    return this.#commands;
  }

  /** `add table` (idempotent), with an optional comment. */
  addTable(comment?: string): this {
    this.#command(`add table ${this.#prefix}${comment ? ` { comment "${comment}"; }` : ""}`);
    return this;
  }

  /** `delete table` (the table must exist: add it first). */
  deleteTable(): this {
    this.#command(`delete table ${this.#prefix}`);
    return this;
  }

  /** `add chain`, idempotent for an identical definition. */
  addChain(chain: ChainDef): this {
    const parts: string[] = [];
    if (chain.hook) {
      const { type, hook, priority } = chain.hook;
      parts.push(`type ${type} hook ${hook} priority ${priority}; policy accept;`);
    }
    if (chain.comment) parts.push(`comment "${chain.comment}";`);
    this.#command(
      `add chain ${this.#prefix} ${chain.name}${parts.length ? ` { ${parts.join(" ")} }` : ""}`,
    );
    return this;
  }

  /** `flush chain`: removes every rule of the chain. */
  flushChain(name: string): this {
    this.#command(`flush chain ${this.#prefix} ${name}`);
    return this;
  }

  /** `delete chain` (the chain must have no rules and no references left). */
  deleteChain(name: string): this {
    this.#command(`delete chain ${this.#prefix} ${name}`);
    return this;
  }

  /** `add rule` with a body in plain nft syntax. */
  addRule(chain: string, body: string): this {
    this.#command(`add rule ${this.#prefix} ${chain} ${body}`);
    return this;
  }

  /** `add set` / `add map`, idempotent for an identical definition. */
  addSet(set: SetDef): this {
    const parts = [`${set.type};`];
    if (set.flags?.length) parts.push(`flags ${set.flags.join(",")};`);
    if (set.timeoutSeconds !== undefined) parts.push(`timeout ${set.timeoutSeconds}s;`);
    if (set.size !== undefined) parts.push(`size ${set.size};`);
    if (set.comment) parts.push(`comment "${set.comment}";`);
    this.#command(`add ${set.kind} ${this.#prefix} ${set.name} { ${parts.join(" ")} }`);
    return this;
  }

  /** `delete set` / `delete map` (no rule may refer to it any more). */
  deleteSet(kind: "set" | "map", name: string): this {
    this.#command(`delete ${kind} ${this.#prefix} ${name}`);
    return this;
  }

  /** `flush set` / `flush map`: removes every element. */
  flushSet(kind: "set" | "map", name: string): this {
    this.#command(`flush ${kind} ${this.#prefix} ${name}`);
    return this;
  }

  /** `add element` commands for elements of one set, in batches. */
  addElements(set: string, elements: readonly ElementDef[]): this {
    return this.#elements("add", set, elements.map(formatElement));
  }

  /**
   * `add element` commands for elements of one set already formatted as the script writes
   * them (`key comment "…" : value`), in batches.
   */
  addElementLines(set: string, lines: readonly string[]): this {
    return this.#elements("add", set, lines);
  }

  /**
   * `add element` commands for runs of formatted elements of one set, each run `count`
   * elements joined by `, `: the same commands as {@link addElementLines} with the runs' elements,
   * a run split where a batch ends.
   */
  addElementRuns(set: string, runs: readonly ElementRun[]): this {
    const parts = this.#parts;
    let size = 0;
    for (const run of runs) {
      let { text, count } = run;
      while (size + count > ELEMENTS_PER_COMMAND) {
        // The run goes on in the next command: cut it after the element that fills this one.
        const take = ELEMENTS_PER_COMMAND - size;
        let cut = -2;
        for (let i = 0; i < take; i++) cut = text.indexOf(", ", cut + 2);
        if (size === 0) this.#open("add", set);
        else parts.push(", ");
        parts.push(text.slice(0, cut), " }\n");
        size = 0;
        text = text.slice(cut + 2);
        count -= take;
      }
      if (size === 0) this.#open("add", set);
      else parts.push(", ");
      parts.push(text);
      size += count;
      if (size === ELEMENTS_PER_COMMAND) {
        parts.push(" }\n");
        size = 0;
      }
    }
    if (size > 0) parts.push(" }\n");
    return this;
  }

  /** `delete element` commands for the given keys of one set, in batches. */
  deleteElements(set: string, keys: readonly string[]): this {
    return this.#elements("delete", set, keys);
  }

  #elements(verb: string, set: string, items: readonly string[]): this {
    for (let i = 0; i < items.length; i += ELEMENTS_PER_COMMAND) {
      this.#open(verb, set);
      const end = Math.min(i + ELEMENTS_PER_COMMAND, items.length);
      for (let j = i; j < end; j++) {
        if (j > i) this.#parts.push(", ");
        this.#parts.push(items[j]);
      }
      this.#parts.push(" }\n");
    }
    return this;
  }

  /** Starts an element command; the caller adds the elements and ` }\n`. */
  #open(verb: string, set: string): void {
    this.#commands++;
    this.#parts.push(`${verb} element ${this.#prefix} ${set} { `);
  }

  #command(text: string): void {
    this.#commands++;
    this.#parts.push(text, "\n");
  }

  /** The script: one command per line, ending in a newline (empty when there are none). */
  toString(): string {
    return this.#parts.join("");
  }

  /**
   * The script of several transactions, in order, written out once (no intermediate copy of
   * each one's megabytes).
   */
  static join(transactions: readonly Transaction[]): string {
    if (transactions.length === 1) return transactions[0].toString();
    return transactions.flatMap((tx) => tx.#parts).join("");
  }
}

function formatElement(e: ElementDef): string {
  const comment = e.comment ? ` comment "${e.comment}"` : "";
  return e.value === undefined ? `${e.key}${comment}` : `${e.key}${comment} : ${e.value}`;
}
