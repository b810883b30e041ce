/**
 * The dry-run diff of the iptables-compatible mode: of one family's full-sync restore section
 * (completed from the kernel's rules as a real full sync is: missing jump rules, stale
 * per-service chains), only the chains whose rules differ from the kernel's, as
 * `iptables-restore --noflush` input. A chain declared in a restore section is flushed and
 * refilled, so leaving out an unchanged one leaves it exactly as it is.
 *
 * Rules are compared in a normalised form, because `iptables-save` prints them its own way:
 * addresses and protocol first, `/32` added, marks as `--set-xmark` with unpadded hex, the
 * default options of REJECT and `recent` spelled out, probabilities with more digits. Pure: the
 * caller reads `iptables-save`.
 *
 * @module
 */
import { parseAddress, parseCIDR } from "../model/ip.ts";
import type { IPFamily } from "../model/service_port.ts";
import { reconcileSection, type SavedTables, splitWords } from "../render/iptables/reconcile.ts";

/** What the transaction does to one family. */
export interface IptablesFamilyDiff {
  readonly family: IPFamily;
  /** Chains created or rewritten, as `table/CHAIN`. */
  readonly chainsWritten: readonly string[];
  /** Chains flushed and deleted (left by an earlier process), as `table/CHAIN`. */
  readonly chainsDeleted: readonly string[];
  /** Jump rules inserted into built-in chains. */
  readonly jumpsAdded: number;
  /** `iptables-restore --noflush` input (empty when nothing changes). */
  readonly script: string;
}

/**
 * The part of `wanted` (one family's full-sync section, without its `#` header) that changes
 * the kernel's `saved` tables.
 */
export function diffIptablesSection(
  family: IPFamily,
  wanted: string,
  saved: SavedTables,
): IptablesFamilyDiff {
  const reconciled = reconcileSection(wanted, saved);
  const chainsWritten: string[] = [];
  const chainsDeleted: string[] = [];
  let jumpsAdded = 0;
  const out: string[] = [];
  for (const block of tableBlocks(reconciled)) {
    const table = block.table as keyof SavedTables;
    const kernel = saved[table] ?? { chains: new Set<string>(), rules: [] };
    const deleted = new Set(block.other.filter((l) => l.startsWith("-X ")).map((l) => l.slice(3)));
    const keep = block.declared.filter((chain) => {
      if (deleted.has(chain) || !kernel.chains.has(chain)) return true;
      const mine = block.rules.get(chain) ?? [];
      const theirs = kernel.rules.filter((r) => r.chain === chain).map((r) => r.words);
      return mine.length !== theirs.length ||
        mine.some((words, i) => normalRule(words, family) !== normalRule(theirs[i], family));
    });
    if (keep.length === 0 && block.other.length === 0) continue;
    for (const chain of keep) {
      (deleted.has(chain) ? chainsDeleted : chainsWritten).push(`${block.table}/${chain}`);
    }
    jumpsAdded += block.other.filter((l) => l.startsWith("-I ")).length;
    out.push(`*${block.table}`, ...keep.map((c) => `:${c} - [0:0]`));
    for (const line of block.order) {
      const chain = line.startsWith("-A ") ? line.split(" ")[1] : undefined;
      if (chain === undefined || keep.includes(chain)) out.push(line);
    }
    out.push("COMMIT");
  }
  return {
    family,
    chainsWritten,
    chainsDeleted,
    jumpsAdded,
    script: out.length === 0 ? "" : `${out.join("\n")}\n`,
  };
}

interface TableBlock {
  readonly table: string;
  readonly declared: string[];
  /** `-A` rules by chain, as words. */
  readonly rules: Map<string, string[][]>;
  /** Lines other than declarations and `-A` (`-I`, `-D`, `-X`). */
  readonly other: string[];
  /** Every non-declaration line in order. */
  readonly order: string[];
}

function tableBlocks(section: string): TableBlock[] {
  const blocks: TableBlock[] = [];
  let block: TableBlock | undefined;
  for (const line of section.split("\n")) {
    if (line.startsWith("*")) {
      block = { table: line.slice(1), declared: [], rules: new Map(), other: [], order: [] };
      blocks.push(block);
    } else if (block === undefined || line === "" || line.startsWith("#")) {
      continue;
    } else if (line === "COMMIT") {
      block = undefined;
    } else if (line.startsWith(":")) {
      block.declared.push(line.slice(1).split(" ")[0]);
    } else {
      block.order.push(line);
      if (line.startsWith("-A ")) {
        const words = splitWords(line.slice(3));
        const list = block.rules.get(words[0]) ?? [];
        list.push(words.slice(1));
        block.rules.set(words[0], list);
      } else block.other.push(line);
    }
  }
  return blocks;
}

const HEADER = new Set(["-s", "-d", "-i", "-o", "-p", "--source", "--destination", "--protocol"]);

/**
 * A rule specification (words after `-A CHAIN`) in one spelling: header matches sorted, each
 * match module with its options sorted, the target with its options, defaults dropped.
 */
export function normalRule(words: readonly string[], family: IPFamily): string {
  const header: string[] = [];
  const modules: { name: string; opts: string[] }[] = [];
  const target: { name: string; opts: string[] } = { name: "", opts: [] };
  let current: { opts: string[] } | undefined;
  let negate = false;
  for (let i = 0; i < words.length; i++) {
    const word = words[i];
    if (word === "!") {
      negate = true;
      continue;
    }
    const not = negate ? "! " : "";
    negate = false;
    if (HEADER.has(word)) {
      const flag = word.length > 2 ? `-${word[2]}` : word;
      const value = normalHeader(flag, words[++i], family);
      // An address match on /0 matches everything: iptables-save leaves it out.
      if (!(value.endsWith("/0") && (flag === "-s" || flag === "-d") && not === "")) {
        header.push(`${not}${flag} ${value}`);
      }
    } else if (word === "-m" || word === "--match") {
      current = { opts: [] };
      modules.push({ name: words[++i], opts: current.opts });
    } else if (word === "-j" || word === "-g" || word === "--jump" || word === "--goto") {
      target.name = `${word.length > 2 ? `-${word[2]}` : word} ${words[++i]}`;
      current = target;
    } else if (word.startsWith("-") && current !== undefined) {
      const values: string[] = [];
      while (i + 1 < words.length && !/^(-|!$)/.test(words[i + 1])) values.push(words[++i]);
      current.opts.push(`${not}${word} ${values.map(normalValue).join(" ")}`.trim());
    }
  }
  const cleanModules = modules.map((m) =>
    `${m.name}[${defaultsDropped(m.name, m.opts).sort().join(";")}]`
  );
  return JSON.stringify({
    header: header.sort(),
    modules: cleanModules.sort(),
    target: `${target.name}[${
      normalTargetOpts(target.name, target.opts, family).sort().join(";")
    }]`,
  });
}

/** An address match as `iptables-save` prints it: the network address and a prefix length. */
function normalHeader(flag: string, value: string, family: IPFamily): string {
  if (flag !== "-s" && flag !== "-d") return value;
  const parsed = parseCIDR(
    value.includes("/") ? value : `${value}/${family === "IPv6" ? 128 : 32}`,
  );
  return parsed.ok ? parsed.cidr : value;
}

/** Hexadecimal numbers (also `value/mask`) in decimal, probabilities rounded, IPv6 canonical. */
function normalValue(value: string): string {
  if (/^0x[0-9a-f]+(\/0x[0-9a-f]+)?$/i.test(value)) {
    return value.split("/").map((v) => String(parseInt(v, 16))).join("/");
  }
  // The statistic match keeps a probability as round(p × 2³¹) and prints it back with 11 digits.
  if (/^0\.\d+$/.test(value)) return String(Math.round(Number(value) * 2 ** 31));
  const bracketed = /^\[([0-9a-f:.]+)\](:\d+)?$/i.exec(value);
  const ip = bracketed ? parseAddress(bracketed[1]) : undefined;
  return ip?.ok ? `[${ip.address}]${bracketed![2] ?? ""}` : value;
}

/** Options `iptables-save` adds by default to match modules, dropped. */
function defaultsDropped(module: string, opts: readonly string[]): string[] {
  if (module !== "recent") return [...opts];
  return opts.filter((o) =>
    o !== "--rsource" && o !== "--mask 4294967295" && o !== "--mask 255.255.255.255" &&
    !/^--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff$/.test(o)
  );
}

/** Target options in `iptables-save`'s spelling, defaults dropped. */
function normalTargetOpts(target: string, opts: readonly string[], family: IPFamily): string[] {
  const out: string[] = [];
  for (const opt of opts) {
    const [name, value = ""] = opt.split(" ");
    if (target === "-j REJECT" && name === "--reject-with") {
      const fallback = family === "IPv6" ? "icmp6-port-unreachable" : "icmp-port-unreachable";
      if (value === fallback) continue;
    }
    if (target === "-j MARK") {
      const mark = Number(value.split("/")[0]);
      if (name === "--or-mark") out.push(`--set-xmark ${mark}/${mark}`);
      else if (name === "--xor-mark") out.push(`--set-xmark ${mark}/0`);
      else if (name === "--set-mark") {
        out.push(`--set-xmark ${value.includes("/") ? value : `${mark}/4294967295`}`);
      } else out.push(opt);
      continue;
    }
    out.push(opt);
  }
  return out;
}
