/**
 * Images of nft tables: what a table holds (sets with their elements, chains with their rules),
 * read from either side of a dry run — the script the proxy would send (`add …` commands, as
 * the renderer writes them) or the kernel's listing (`nft list table …`, as nft prints it).
 *
 * The two spellings differ in small ways (nft prints `priority dstnat - 10` for `-110`,
 * `0x00000000` for `0`, `tcp dport` for a DNAT map's `th dport`, counters with their values,
 * compressed IPv6 addresses, `timeout 3h` for `10800s`, and protocols as numbers — `6` for
 * `tcp` in elements and rules — wherever it cannot read `/etc/protocols`, as in Debian 13's
 * minimal root). Every set header, rule and element therefore carries a normalised form
 * (`same`) used only for comparison, next to its original text (used to write commands); an
 * element's key is written with protocol names whoever printed it. Pure: no I/O.
 *
 * @module
 */
import { protocolName } from "../model/ip_protocol.ts";
import {
  between,
  braceDepth,
  clip,
  normalTokens,
  priority,
  seconds,
  splitElements,
} from "./nft_spelling.ts";

/** One set or map element. */
export interface ElementImage {
  /** The element's key, normalised: what `delete element` names and comparisons use. */
  readonly key: string;
  /** The key as written, protocols by name (valid in a `delete element` command). */
  readonly keyText: string;
  /** The whole element as written (valid in an `add element` command). */
  readonly text: string;
  /** Key, value and comment normalised; equal for equal elements (counter values aside). */
  readonly same: string;
}

/** One named set or map. */
export interface SetImage {
  readonly kind: "set" | "map";
  readonly name: string;
  /** The definition as a script writes it between braces (`type …; flags …; comment "…";`). */
  readonly spec: string;
  /** The definition normalised, for comparison. */
  readonly same: string;
  /** Filled by the packet path (`flags dynamic`): its elements are the kernel's, not ours. */
  readonly dynamic: boolean;
  /** Where its elements hold an IP protocol (read from its `type` or `typeof`). */
  readonly protocols: ProtocolFields;
  /** Elements by normalised key, in the order written. */
  readonly elements: Map<string, ElementImage>;
}

/**
 * Positions, in an element's key and value concatenations (`a . b . c`, counted from 0), of
 * the components that are IP protocols.
 */
export interface ProtocolFields {
  readonly key: readonly number[];
  readonly value: readonly number[];
}

/** A set without protocol components. */
const NO_PROTOCOLS: ProtocolFields = { key: [], value: [] };

/** One rule. */
export interface RuleImage {
  readonly text: string;
  readonly same: string;
}

/** One chain; base chains have a hook line. */
export interface ChainImage {
  readonly name: string;
  /** The definition as a script writes it between braces, or empty for a regular chain. */
  readonly spec: string;
  /** The definition normalised (hook, numeric priority, policy), or empty. */
  readonly same: string;
  readonly rules: RuleImage[];
}

/** One table. */
export interface TableImage {
  readonly family: string;
  readonly name: string;
  /** The table's comment, if any. */
  comment: string;
  readonly sets: Map<string, SetImage>;
  readonly chains: Map<string, ChainImage>;
}

/** A script or listing that cannot be read. */
export class TableTextError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TableTextError";
  }
}

/** `family name` of a table: the key of {@link TableImage} maps. */
export function tableId(family: string, name: string): string {
  return `${family} ${name}`;
}

const COMMAND =
  /^(add|delete|flush) (table|chain|rule|set|map|element) (ip|ip6|inet|arp|bridge|netdev) (\S+)(?: (\S+))?(?: (.*))?$/;

/**
 * The tables a script leaves behind when applied to an empty ruleset, by {@link tableId}:
 * every `add`, `flush` and `delete` command played in order. Comment lines (`#`) and blank
 * lines are skipped; anything else unknown throws {@link TableTextError} naming the line.
 */
export function tablesFromScript(script: string): Map<string, TableImage> {
  const tables = new Map<string, TableImage>();
  playScript(tables, script);
  return tables;
}

/**
 * Plays a script's commands on `tables` (changed in place), as nft would apply them to the
 * tables they describe. Throws {@link TableTextError} like {@link tablesFromScript}.
 */
export function playScript(tables: Map<string, TableImage>, script: string): void {
  const lines = script.split("\n");
  for (let n = 0; n < lines.length; n++) {
    const line = lines[n].trim();
    if (line === "" || line.startsWith("#")) continue;
    const m = COMMAND.exec(line);
    if (m === null) throw new TableTextError(`line ${n + 1}: not a command: ${clip(line)}`);
    const [, verb, object, family, tableName, name = "", rest = ""] = m;
    const id = tableId(family, tableName);
    if (object === "table") {
      if (verb === "delete") tables.delete(id);
      else if (verb === "add" && !tables.has(id)) {
        const table = emptyTable(family, tableName);
        const comment = /comment "([^"]*)"/.exec(`${name} ${rest}`);
        if (comment) table.comment = comment[1];
        tables.set(id, table);
      }
      continue;
    }
    const table = tables.get(id);
    if (table === undefined) throw new TableTextError(`line ${n + 1}: no table ${id}`);
    playCommand(table, verb, object, name, rest, n + 1);
  }
}

function playCommand(
  table: TableImage,
  verb: string,
  object: string,
  name: string,
  rest: string,
  line: number,
): void {
  const fail = (what: string) => {
    throw new TableTextError(`line ${line}: ${what}`);
  };
  if (object === "set" || object === "map") {
    if (verb === "add") {
      if (!table.sets.has(name)) {
        const spec = between(rest, "{", "}") ?? fail(`${object} ${name} without a definition`);
        table.sets.set(name, newSet(object, name, spec.split(";")));
      }
    } else if (verb === "flush") table.sets.get(name)?.elements.clear();
    else table.sets.delete(name);
  } else if (object === "chain") {
    if (verb === "add") {
      if (!table.chains.has(name)) {
        const spec = between(rest, "{", "}") ?? "";
        table.chains.set(name, newChain(name, spec.split(";")));
      }
    } else if (verb === "flush") {
      const chain = table.chains.get(name) ?? fail(`flush of unknown chain ${name}`);
      chain.rules.length = 0;
    } else table.chains.delete(name);
  } else if (object === "rule") {
    if (verb !== "add") fail(`only "add rule" is understood`);
    const chain = table.chains.get(name) ?? fail(`rule for unknown chain ${name}`);
    chain.rules.push(ruleImage(rest));
  } else {
    const set = table.sets.get(name) ?? fail(`elements for unknown set ${name}`);
    const body = between(rest, "{", "}") ?? fail(`elements of ${name} without braces`);
    for (const text of splitElements(body)) {
      const element = elementImage(text, set.protocols);
      if (verb === "add") {
        if (!set.elements.has(element.key)) set.elements.set(element.key, element);
      } else set.elements.delete(element.key);
    }
  }
}

/**
 * The tables of an `nft list table …` / `nft list ruleset` output, by {@link tableId}.
 * Throws {@link TableTextError} on text that is not a listing.
 */
export function tablesFromListing(listing: string): Map<string, TableImage> {
  const tables = new Map<string, TableImage>();
  const lines = listing.split("\n");
  let table: TableImage | undefined;
  let n = 0;
  const next = (): string | undefined => n < lines.length ? lines[n++].trim() : undefined;
  for (let line = next(); line !== undefined; line = next()) {
    if (line === "") continue;
    if (table === undefined) {
      const m = /^table (\S+) (\S+) \{$/.exec(line);
      if (m === null) {
        throw new TableTextError(`listing line ${n}: expected a table: ${clip(line)}`);
      }
      table = emptyTable(m[1], m[2]);
      tables.set(tableId(m[1], m[2]), table);
      continue;
    }
    if (line === "}") {
      table = undefined;
      continue;
    }
    const comment = /^comment "([^"]*)"$/.exec(line);
    if (comment) {
      table.comment = comment[1];
      continue;
    }
    const block = /^(set|map|chain|flowtable|counter|quota|limit|ct \S+) (\S+) \{$/.exec(line);
    if (block === null) {
      throw new TableTextError(`listing line ${n}: not a set, map or chain: ${clip(line)}`);
    }
    const body: string[] = [];
    for (let inner = next(); inner !== "}"; inner = next()) {
      if (inner === undefined) throw new TableTextError(`listing ends inside ${block[2]}`);
      // A statement spans lines until its braces close (element lists, long anonymous sets):
      // 100k elements are 100k lines, so the depth is counted line by line, once each.
      const parts = [inner];
      for (let depth = braceDepth(inner); depth > 0;) {
        const more = next();
        if (more === undefined) throw new TableTextError(`listing ends inside ${block[2]}`);
        parts.push(more);
        depth += braceDepth(more);
      }
      const statement = parts.join(" ");
      if (statement !== "") body.push(statement);
    }
    const [kind, name] = [block[1], block[2]];
    if (kind === "set" || kind === "map") table.sets.set(name, listedSet(kind, name, body));
    else if (kind === "chain") table.chains.set(name, listedChain(name, body));
  }
  if (table !== undefined) throw new TableTextError(`listing ends inside table ${table.name}`);
  return tables;
}

function listedSet(kind: "set" | "map", name: string, body: readonly string[]): SetImage {
  const elementsAt = body.findIndex((s) => s.startsWith("elements = {"));
  const header = elementsAt < 0 ? body : body.filter((_, i) => i !== elementsAt);
  const set = newSet(kind, name, header);
  if (elementsAt >= 0) {
    const list = between(body[elementsAt], "{", "}") ?? "";
    for (const text of splitElements(list)) {
      const element = elementImage(text, set.protocols);
      set.elements.set(element.key, element);
    }
  }
  return set;
}

function listedChain(name: string, body: readonly string[]): ChainImage {
  const hookAt = body.findIndex((s) => /^type \S+ hook /.test(s));
  const header = body.filter((s, i) => i === hookAt || /^comment "[^"]*"$/.test(s));
  const chain = newChain(name, header.flatMap((s) => s.split(";")));
  for (const statement of body) {
    if (!header.includes(statement)) chain.rules.push(ruleImage(statement));
  }
  return chain;
}

function emptyTable(family: string, name: string): TableImage {
  return { family, name, comment: "", sets: new Map(), chains: new Map() };
}

function newSet(kind: "set" | "map", name: string, parts: readonly string[]): SetImage {
  const clauses = parts.map((p) => p.trim()).filter((p) => p !== "");
  const normal = clauses.map(normalSetClause);
  // A dynamic set without a size is listed with nft's default one.
  if (
    normal.some((c) => /^flags .*\bdynamic\b/.test(c)) && !normal.some((c) => c.startsWith("size "))
  ) {
    normal.push("size 65535");
  }
  normal.sort();
  return {
    kind,
    name,
    spec: clauses.map((c) => `${c};`).join(" "),
    same: `${kind} ${normal.join("; ")}`,
    dynamic: clauses.some((c) => /^flags .*\bdynamic\b/.test(c)),
    protocols: protocolFields(clauses),
    elements: new Map(),
  };
}

/** Datatypes (`type`) and expressions (`typeof`) whose values are IP protocols. */
const PROTOCOL_FIELD =
  /^(?:inet_proto|meta l4proto|ip protocol|ip6 nexthdr|ct(?: original| reply)? protocol)$/;

/** Where a set's elements hold protocols, from its `type …` or `typeof …` clause. */
function protocolFields(clauses: readonly string[]): ProtocolFields {
  const definition = clauses.find((c) => /^type(?:of)? /.test(c));
  if (definition === undefined) return NO_PROTOCOLS;
  const [key, value = ""] = definition.replace(/^type(?:of)? /, "").split(" : ");
  const at = (side: string) =>
    side.split(" . ").flatMap((field, i) => PROTOCOL_FIELD.test(field.trim()) ? [i] : []);
  return { key: at(key), value: at(value) };
}

/** A concatenation with its protocol components (at `positions`) by name. */
function withProtocolNames(concatenation: string, positions: readonly number[]): string {
  if (positions.length === 0) return concatenation;
  const parts = concatenation.split(" . ");
  for (const i of positions) {
    if (i < parts.length) parts[i] = protocolName(parts[i].trim());
  }
  return parts.join(" . ");
}

function normalSetClause(clause: string): string {
  const flags = /^flags (.*)$/.exec(clause);
  if (flags) return `flags ${flags[1].split(",").map((f) => f.trim()).sort().join(",")}`;
  const timeout = /^timeout (\S+)$/.exec(clause);
  if (timeout) return `timeout ${seconds(timeout[1])}`;
  return normalTokens(clause);
}

function newChain(name: string, parts: readonly string[]): ChainImage {
  const clauses = parts.map((p) => p.trim()).filter((p) => p !== "");
  const normal: string[] = [];
  for (const clause of clauses) {
    const hook = /^type (\S+) hook (\S+)(?: device \S+)? priority (.+)$/.exec(clause);
    normal.push(hook ? `type ${hook[1]} hook ${hook[2]} priority ${priority(hook[3])}` : clause);
  }
  return {
    name,
    spec: clauses.map((c) => `${c};`).join(" "),
    same: normal.join("; "),
    rules: [],
  };
}

/** Expressions whose right-hand side is an IP protocol, and that side (a value or a set). */
const PROTOCOL_MATCH =
  /\b(meta l4proto|ip protocol|ip6 nexthdr|ct(?: original| reply)? protocol) ((?:!= )?)(\{[^}]*\}|\d+)(?=[\s;]|$)/g;

function ruleImage(text: string): RuleImage {
  let same = text
    // Protocols by name: nft prints `meta l4proto 6` without /etc/protocols.
    .replace(
      PROTOCOL_MATCH,
      (_, expression, not, value: string) =>
        `${expression} ${not}${value.replace(/\b\d+\b/g, (n) => protocolName(n))}`,
    )
    // A mask of leading ones prints as a prefix: `meta mark & 0x80000000 == 0` is listed as
    // `meta mark 0x00000000/1`.
    .replace(/ (!= )?(0x[0-9a-f]+)\/(\d+)\b/g, (_, not, value, bits) => {
      const mask = bits === "0" ? 0 : (0xffffffff << (32 - Number(bits))) >>> 0;
      return ` & ${mask} ${not ? "!=" : "=="} ${value}`;
    })
    .replace(/\btimeout (\S+)/g, (_, time) => `timeout ${seconds(time)}`);
  // nft leaves out the family of a plain DNAT address in an ip/ip6 table, and the `==` it
  // reads by default wherever it likes.
  same = normalTokens(same.replace(/\bdnat ip6? to\b/g, "dnat to")).replace(/ == /g, " ");
  // An explicit `meta l4proto tcp` before a `tcp dport` is the dependency nft adds anyway;
  // nft prints the rule without it.
  same = same.replace(/\bmeta l4proto (tcp|udp|sctp) (?=.*\b\1 [ds]port\b)/g, "");
  // nft prints a DNAT map's `th dport` as `tcp dport` (or udp, sctp), and only sometimes: the
  // hidden `meta l4proto` match depends on the transaction that created the rule.
  if (/\bdnat\b/.test(same)) same = same.replace(/\b(tcp|udp|sctp) dport\b/g, "th dport");
  return { text, same };
}

/**
 * One element as written by a script (`key comment "…" : value`) or listed by nft
 * (`key counter packets 1 bytes 60 expires 2h comment "…" : value`), of a set whose elements
 * hold protocols at `protocols` (default: nowhere).
 */
export function elementImage(text: string, protocols: ProtocolFields = NO_PROTOCOLS): ElementImage {
  let comment = "";
  let unquoted = "";
  // Take the comment out first: it may hold " : " and keywords.
  const quote = text.indexOf(' comment "');
  if (quote >= 0) {
    const end = text.indexOf('"', quote + 10);
    comment = text.slice(quote + 10, end < 0 ? undefined : end);
    unquoted = text.slice(0, quote) + (end < 0 ? "" : text.slice(end + 1));
  } else unquoted = text;
  const colon = unquoted.indexOf(" : ");
  const left = colon < 0 ? unquoted : unquoted.slice(0, colon);
  const value = colon < 0 ? "" : unquoted.slice(colon + 3).trim();
  const keyText = withProtocolNames(
    left
      .replace(/ counter(?: packets \d+ bytes \d+)?/, "")
      .replace(/ (?:timeout|expires) \S+/g, "")
      .trim(),
    protocols.key,
  );
  const key = normalTokens(keyText);
  const same = `${key}${comment === "" ? "" : ` comment "${comment}"`}` +
    (value === "" ? "" : ` : ${normalTokens(withProtocolNames(value, protocols.value))}`);
  return { key, keyText, text, same };
}

export { splitElements };
