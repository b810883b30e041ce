/**
 * An in-memory model of the nft tables this proxy writes, for specs that run in milliseconds
 * without a kernel (upstream's proxier tests do the same with knftables' `Fake`).
 *
 * {@link NftModel.apply} plays a script in our own grammar — one command per line: `add` /
 * `delete` table; `add` / `flush` / `delete` chain; `add rule`; `add` / `flush` / `delete`
 * set and map; `add` / `delete` element — as one transaction: a command the kernel would
 * refuse throws {@link NftModelError} naming the line, and the model is then unchanged. The
 * tables are read back by name: chains with their rules in order, sets and maps with their
 * elements (key, value, comment) in the order they were added.
 *
 * What the kernel refuses, the model refuses: a command on a table, chain, set or element that
 * does not exist; a rule or an element naming a chain, set or map that does not exist; a
 * chain or set redefined differently; deleting a chain that still has rules or that a rule or
 * a map element jumps to, or a set a rule uses; adding a map element whose key is there with
 * another value. Adding an element whose key is there with the same value changes nothing
 * (the first comment stays), as in the kernel. Not modelled: rule and element syntax beyond
 * what names other objects (nft parses it, the model keeps the text), overlapping intervals,
 * and anything the packet path writes. `tests/nft_model_kernel_test.ts` proves the model
 * against the kernel.
 *
 * @example
 * ```ts
 * const model = new NftModel();
 * model.apply(script);
 * model.table("ip", "kube-nftproxy").lookup("service-ips", "10.96.0.10 . tcp . 80");
 * // "goto lb-tcp-2"
 * ```
 *
 * @module
 */

/** One element of a set or map. */
export interface ModelElement {
  readonly key: string;
  /** The map value (`goto lb-tcp-2`, `10.244.1.1 . 8080`); undefined in a set. */
  readonly value?: string;
  readonly comment?: string;
}

/** A chain: its definition (empty for a regular chain) and its rules in order. */
export interface ModelChain {
  readonly name: string;
  /** What stands between the braces of `add chain … { … }`, spaces normalised; or "". */
  readonly spec: string;
  readonly rules: readonly string[];
}

/** A named set or map. */
export interface ModelSet {
  readonly kind: "set" | "map";
  readonly name: string;
  /** What stands between the braces of `add set … { … }`, spaces normalised. */
  readonly spec: string;
  /** By key, in the order added. */
  readonly elements: ReadonlyMap<string, ModelElement>;
}

/** A command the kernel would refuse. */
export class NftModelError extends Error {
  /** 1-based line of the script. */
  readonly line: number;
  /** That line. */
  readonly command: string;

  constructor(line: number, command: string, reason: string) {
    super(
      `line ${line}: ${reason}: ${command.length > 200 ? `${command.slice(0, 200)}…` : command}`,
    );
    this.name = "NftModelError";
    this.line = line;
    this.command = command;
  }
}

interface Chain {
  name: string;
  spec: string;
  rules: string[];
}

interface NamedSet {
  kind: "set" | "map";
  name: string;
  spec: string;
  elements: Map<string, ModelElement>;
}

interface Table {
  family: string;
  name: string;
  comment?: string;
  chains: Map<string, Chain>;
  sets: Map<string, NamedSet>;
}

const COMMAND =
  /^(add|delete|flush) (table|chain|rule|set|map|element) (ip|ip6|inet) ([A-Za-z][\w.-]*)(?: (.*))?$/;

/** A chain, set or map name as our scripts write them (the renderer keeps them safe). */
const NAME = String.raw`[^\s@,{}";]+`;

/** One table of a model, read-only. */
export class ModelTable {
  readonly #table: Table;

  constructor(table: Table) {
    this.#table = table;
  }

  /** `family name`. */
  get id(): string {
    return `${this.#table.family} ${this.#table.name}`;
  }

  /** The table's comment, if any. */
  get comment(): string | undefined {
    return this.#table.comment;
  }

  /** Chain names, in the order created. */
  get chains(): string[] {
    return [...this.#table.chains.keys()];
  }

  /** Set and map names, in the order created. */
  get sets(): string[] {
    return [...this.#table.sets.keys()];
  }

  /** A chain, or undefined. */
  chain(name: string): ModelChain | undefined {
    return this.#table.chains.get(name);
  }

  /** A chain's rules in order; throws when there is no such chain. */
  rules(chain: string): readonly string[] {
    const c = this.#table.chains.get(chain);
    if (c === undefined) throw new Error(`${this.id} has no chain ${chain}`);
    return c.rules;
  }

  /** A set or map, or undefined. */
  set(name: string): ModelSet | undefined {
    return this.#table.sets.get(name);
  }

  /** A set's or map's elements in the order added; throws when there is no such set. */
  elements(set: string): ModelElement[] {
    const s = this.#table.sets.get(set);
    if (s === undefined) throw new Error(`${this.id} has no set or map ${set}`);
    return [...s.elements.values()];
  }

  /** A set's keys (or a map's), sorted. */
  keys(set: string): string[] {
    return this.elements(set).map((e) => e.key).sort();
  }

  /**
   * What a map gives for a key (`goto lb-tcp-2`), `true` for a key of a set, or undefined when
   * the key is not there.
   */
  lookup(set: string, key: string): string | true | undefined {
    const element = this.set(set)?.elements.get(key);
    return element === undefined ? undefined : element.value ?? true;
  }
}

/** Our nft tables in memory; see the module documentation. */
export class NftModel {
  #tables = new Map<string, Table>();

  /** Plays a script as one transaction; throws {@link NftModelError} and changes nothing. */
  apply(script: string): void {
    const tables = cloneTables(this.#tables);
    const lines = script.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      if (line.trim() === "" || line.trimStart().startsWith("#")) continue;
      play(tables, line, i + 1);
    }
    this.#tables = tables;
  }

  /** Table ids (`family name`), in the order created. */
  tables(): string[] {
    return [...this.#tables.keys()];
  }

  /** A table; throws when there is none. */
  table(family: string, name: string): ModelTable {
    const table = this.#tables.get(`${family} ${name}`);
    if (table === undefined) throw new Error(`no table ${family} ${name}`);
    return new ModelTable(table);
  }

  /** Whether the table exists. */
  has(family: string, name: string): boolean {
    return this.#tables.has(`${family} ${name}`);
  }

  /**
   * The tables as canonical text, for comparing two models: tables, chains and sets by name,
   * rules in order, elements sorted (the order they were added in aside).
   */
  canonical(): string {
    const byName = <T>(m: Map<string, T>) => [...m].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
    const tables = byName(this.#tables).map(([id, t]) => ({
      id,
      comment: t.comment,
      chains: byName(t.chains).map(([, c]) => c),
      sets: byName(t.sets).map(([, set]) => ({
        kind: set.kind,
        name: set.name,
        spec: set.spec,
        elements: [...set.elements.values()].map(formatElement).sort(),
      })),
    }));
    return JSON.stringify(tables, null, 1);
  }

  /**
   * A script that builds the model's tables in an empty ruleset: tables, sets and maps,
   * chains, then rules, then elements (which may name chains).
   */
  dump(): string {
    const out: string[] = [];
    for (const t of this.#tables.values()) {
      const at = `${t.family} ${t.name}`;
      out.push(`add table ${at}${t.comment === undefined ? "" : ` { comment "${t.comment}"; }`}`);
      for (const s of t.sets.values()) out.push(`add ${s.kind} ${at} ${s.name} { ${s.spec} }`);
      for (const c of t.chains.values()) {
        out.push(`add chain ${at} ${c.name}${c.spec === "" ? "" : ` { ${c.spec} }`}`);
      }
      for (const c of t.chains.values()) {
        for (const rule of c.rules) out.push(`add rule ${at} ${c.name} ${rule}`);
      }
      for (const s of t.sets.values()) {
        if (s.elements.size === 0) continue;
        out.push(
          `add element ${at} ${s.name} { ${
            [...s.elements.values()].map(formatElement).join(", ")
          } }`,
        );
      }
    }
    return out.map((line) => `${line}\n`).join("");
  }
}

function cloneTables(tables: Map<string, Table>): Map<string, Table> {
  const copy = new Map<string, Table>();
  for (const [id, t] of tables) {
    copy.set(id, {
      ...t,
      chains: new Map([...t.chains].map(([n, c]) => [n, { ...c, rules: [...c.rules] }])),
      sets: new Map([...t.sets].map(([n, s]) => [n, { ...s, elements: new Map(s.elements) }])),
    });
  }
  return copy;
}

function play(tables: Map<string, Table>, line: string, n: number): void {
  const fail = (reason: string): never => {
    throw new NftModelError(n, line, reason);
  };
  const m = COMMAND.exec(line.trim()) ?? fail("not a command the model knows");
  const [, verb, object, family, tableName, rest = ""] = m;
  const id = `${family} ${tableName}`;
  if (object === "table") {
    if (verb === "add") {
      if (!tables.has(id)) {
        const comment = /^\{ comment "([^"]*)"; \}$/.exec(rest);
        if (rest !== "" && comment === null) fail("table definition not understood");
        tables.set(id, {
          family,
          name: tableName,
          comment: comment?.[1],
          chains: new Map(),
          sets: new Map(),
        });
      }
    } else if (verb === "delete") {
      if (!tables.delete(id)) fail("No such file or directory (no such table)");
    } else fail("flush table is not modelled");
    return;
  }
  const table = tables.get(id) ?? fail("No such file or directory (no such table)");
  const space = rest.indexOf(" ");
  const name = space < 0 ? rest : rest.slice(0, space);
  const body = space < 0 ? "" : rest.slice(space + 1);
  if (name === "") fail("no name");
  switch (object) {
    case "chain":
      return chainCommand(table, verb, name, body, fail);
    case "rule": {
      if (verb !== "add") fail(`${verb} rule is not modelled`);
      const chain = table.chains.get(name) ?? fail(`No such file or directory (no chain ${name})`);
      if (body === "") fail("empty rule");
      checkRuleReferences(table, body, fail);
      chain.rules.push(body);
      return;
    }
    case "set":
    case "map":
      return setCommand(table, verb, object, name, body, fail);
    case "element":
      return elementCommand(table, verb, name, body, fail);
  }
}

function chainCommand(
  table: Table,
  verb: string,
  name: string,
  body: string,
  fail: (reason: string) => never,
): void {
  const existing = table.chains.get(name);
  if (verb === "add") {
    const spec = body === "" ? "" : braced(body) ?? fail("chain definition not understood");
    if (existing === undefined) table.chains.set(name, { name, spec, rules: [] });
    else if (spec !== "" && spec !== existing.spec) fail("chain exists with another definition");
    return;
  }
  if (body !== "") fail("unexpected text after the chain name");
  if (existing === undefined) fail(`No such file or directory (no chain ${name})`);
  if (verb === "flush") {
    existing.rules.length = 0;
    return;
  }
  if (existing.rules.length > 0) fail(`Device or resource busy (chain ${name} has rules)`);
  const user = chainUser(table, name);
  if (user !== undefined) fail(`Device or resource busy (chain ${name} is used by ${user})`);
  table.chains.delete(name);
}

function setCommand(
  table: Table,
  verb: string,
  kind: "set" | "map",
  name: string,
  body: string,
  fail: (reason: string) => never,
): void {
  const existing = table.sets.get(name);
  if (existing !== undefined && existing.kind !== kind) fail(`${name} is a ${existing.kind}`);
  if (verb === "add") {
    const spec = braced(body) ?? fail(`${kind} definition not understood`);
    if (existing === undefined) table.sets.set(name, { kind, name, spec, elements: new Map() });
    else if (spec !== existing.spec) fail(`File exists (${kind} ${name} has another definition)`);
    return;
  }
  if (body !== "") fail(`unexpected text after the ${kind} name`);
  if (existing === undefined) fail(`No such file or directory (no ${kind} ${name})`);
  if (verb === "flush") {
    existing.elements.clear();
    return;
  }
  const user = setUser(table, name);
  if (user !== undefined) fail(`Device or resource busy (${kind} ${name} is used by ${user})`);
  table.sets.delete(name);
}

function elementCommand(
  table: Table,
  verb: string,
  name: string,
  body: string,
  fail: (reason: string) => never,
): void {
  const set = table.sets.get(name) ?? fail(`No such file or directory (no set or map ${name})`);
  const list = braced(body, false) ?? fail("elements not understood");
  for (const item of splitElements(list)) {
    const element = parseElement(item) ?? fail(`element not understood: ${item}`);
    const existing = set.elements.get(element.key);
    if (verb === "delete") {
      if (existing === undefined) {
        fail(`No such file or directory (no element ${element.key} in ${name})`);
      }
      set.elements.delete(element.key);
      continue;
    }
    if (set.kind === "map" && element.value === undefined) fail("a map element needs a value");
    if (set.kind === "set" && element.value !== undefined) fail("a set element has no value");
    const target = /^(?:goto|jump) (\S+)$/.exec(element.value ?? "");
    if (target && !table.chains.has(target[1])) {
      fail(`No such file or directory (no chain ${target[1]})`);
    }
    if (existing === undefined) set.elements.set(element.key, element);
    else if (existing.value !== element.value) {
      fail(`File exists (${element.key} maps to ${existing.value} in ${name})`);
    }
  }
}

/** The text between a body's outer braces, spaces normalised; undefined without braces. */
function braced(body: string, normalise = true): string | undefined {
  const m = /^\{ ?(.*?) ?\}$/.exec(body.trim());
  if (m === null) return undefined;
  return normalise ? m[1].replace(/\s+/g, " ").trim() : m[1];
}

/** Elements separated by `, ` outside quotes. */
function splitElements(list: string): string[] {
  const items: string[] = [];
  let quoted = false;
  let start = 0;
  for (let i = 0; i < list.length; i++) {
    if (list[i] === '"') quoted = !quoted;
    else if (!quoted && list[i] === "," && list[i + 1] === " ") {
      items.push(list.slice(start, i));
      start = i + 2;
    }
  }
  items.push(list.slice(start));
  return items.map((s) => s.trim()).filter((s) => s !== "");
}

/** `key[ comment "…"][ : value]`. */
function parseElement(item: string): ModelElement | undefined {
  const m = /^(.+?)(?: comment "([^"]*)")?(?: : (.+))?$/.exec(item);
  if (m === null || m[1].includes('"')) return undefined;
  const element: { key: string; value?: string; comment?: string } = { key: m[1].trim() };
  if (m[3] !== undefined) element.value = m[3].trim();
  if (m[2] !== undefined) element.comment = m[2];
  return element;
}

function formatElement(e: ModelElement): string {
  const comment = e.comment === undefined ? "" : ` comment "${e.comment}"`;
  return e.value === undefined ? `${e.key}${comment}` : `${e.key}${comment} : ${e.value}`;
}

/** Chains (`jump X` / `goto X`) and sets (`@X`) a rule names. */
function ruleReferences(rule: string): { chains: string[]; sets: string[] } {
  const bare = rule.replace(/"[^"]*"/g, '""');
  const chains = [...bare.matchAll(new RegExp(`\\b(?:jump|goto) (${NAME})`, "g"))].map((m) => m[1]);
  const sets = [...bare.matchAll(new RegExp(`@(${NAME})`, "g"))].map((m) => m[1]);
  return { chains, sets };
}

function checkRuleReferences(table: Table, rule: string, fail: (reason: string) => never): void {
  const { chains, sets } = ruleReferences(rule);
  for (const c of chains) {
    if (!table.chains.has(c)) fail(`No such file or directory (no chain ${c})`);
  }
  for (const s of sets) {
    if (!table.sets.has(s)) fail(`No such file or directory (no set or map ${s})`);
  }
}

/** A rule or map element that jumps to the chain, named; or undefined. */
function chainUser(table: Table, name: string): string | undefined {
  for (const c of table.chains.values()) {
    if (c.rules.some((r) => ruleReferences(r).chains.includes(name))) return `chain ${c.name}`;
  }
  for (const s of table.sets.values()) {
    for (const e of s.elements.values()) {
      if (e.value === `goto ${name}` || e.value === `jump ${name}`) return `map ${s.name}`;
    }
  }
  return undefined;
}

/** A rule that uses the set, named; or undefined. */
function setUser(table: Table, name: string): string | undefined {
  for (const c of table.chains.values()) {
    if (c.rules.some((r) => ruleReferences(r).sets.includes(name))) return `chain ${c.name}`;
  }
  return undefined;
}
