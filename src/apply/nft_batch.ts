/**
 * A full sync's script committed as one transaction written over netlink, not by `nft -f`:
 * at 10k services nft spends ~1.2 s parsing, checking and encoding the 120k elements of the
 * endpoint and dispatch maps, the kernel ~0.3 s inserting them.
 *
 * The script is split in two. Its small part — tables, chains, sets, rules, and the elements
 * of sets this module does not encode — goes to nft, renamed to a stage table created
 * `dormant` (its base chains hook nothing, so no packet ever sees it). The stage is read back
 * over netlink, as the kernel holds it, and the whole transaction is written as one batch:
 * the table (replaced when the script replaces it), the stage's chains, sets, elements and
 * rules under the real table's name, the big maps' elements encoded here
 * (nft_element_codec.ts), and the stage's removal. The kernel applies all of it or nothing,
 * as it does an `nft -f` file; the tables list as nft would have made them (a kernel test
 * compares the two).
 *
 * Full syncs are written so: those that (re)create the tables — a first sync, a restart, a
 * restore — and the periodic re-sync, which flushes chains and sets and fills them again (then
 * the batch flushes after its adds, and deletes last, as the script orders them). Partial syncs,
 * and a re-sync whose rules hold anonymous sets (their names would clash with those of the rules
 * being flushed), go to nft: {@link applyOverNetlink} declines them before doing anything.
 * Anything unexpected in a script it takes — an element it cannot encode, a refusal — throws,
 * after removing the stage; the caller then hands the same script to `nft -f`.
 *
 * @module
 */
import {
  AttributeWriter,
  ElementCodecError,
  type SetCodec,
  setCodec,
  splitElements,
  writeElement,
} from "./nft_element_codec.ts";
import {
  attributes,
  attributeText,
  NetlinkError,
  requestObjects,
  sendBatch,
  stringAttr,
} from "./nft_netlink.ts";

/** How a full script gets to the kernel over netlink. */
export interface NetlinkApplyOptions {
  /** The table the script programs (in each of its families). */
  readonly table: string;
  /** Applies a script with `nft -f` (the stage's). */
  readonly runNft: (script: string) => Promise<void>;
}

/** The name of the dormant table a full sync is staged in. */
export function stageTableName(table: string): string {
  return `${table}-stage`;
}

const NFNL_SUBSYS_NFTABLES = 10;
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_APPEND = 0x800;
const NLM_F_CREATE = 0x400;

const MSG = {
  newTable: 0,
  getTable: 1,
  delTable: 2,
  newChain: 3,
  getChain: 4,
  delChain: 5,
  newRule: 6,
  getRule: 7,
  delRule: 8,
  newSet: 9,
  getSet: 10,
  delSet: 11,
  newSetElem: 12,
  getSetElem: 13,
  delSetElem: 14,
} as const;

const NFTA_TABLE_NAME = 1;
const NFTA_TABLE_USERDATA = 6;
/** Every object's first attribute names its table (NFTA_{CHAIN,RULE,SET,SET_ELEM_LIST}_TABLE). */
const NFTA_TABLE = 1;
const NFTA_CHAIN_NAME = 3;
const NFTA_CHAIN_FLAGS = 10;
const NFT_CHAIN_BASE = 1;
const NFTA_RULE_CHAIN = 2;
const NFTA_SET_NAME = 2;
const NFTA_SET_ID = 10;

/**
 * The attributes of a dumped object that describe it (and so are written back); the others
 * are the kernel's bookkeeping (handles, use counts, positions, element counts, the set
 * back end's name), some of which it refuses as input.
 */
const DESCRIBING = {
  /** Table, name, hook, policy, type, user data. */
  chain: new Set([1, 3, 4, 5, 7, 12]),
  /** Table, name, flags, key and data types and lengths, policy, size/concatenation, timeout,
   * garbage collection, user data, object type, expressions. */
  set: new Set([1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 17, 18]),
  /** Table, chain, expressions, compat, user data. */
  rule: new Set([1, 2, 4, 5, 7]),
  /** Table, set, elements. */
  elements: new Set([1, 2, 3]),
};
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;

/** Element bytes per NEWSETELEM message: a nested attribute's length must fit 16 bits. */
const ELEMENT_BYTES_PER_MESSAGE = 48 * 1024;

const FAMILY_NUMBERS: Record<string, number> = { ip: 2, ip6: 10 };

/** What the script asks of one family's table, split. */
interface FamilyPlan {
  readonly family: string;
  /** The script deletes the table first (replacing what the kernel has). */
  replace: boolean;
  /** Chains in the order the script adds them. */
  readonly chains: string[];
  /** Sets whose elements are encoded here, with their codecs. */
  readonly codecs: Map<string, SetCodec>;
  /** Encoded element lists per set, in script order. */
  readonly elements: Array<{ set: string; list: string }>;
  /** Chains and sets the script flushes (a full re-sync), after adding them. */
  readonly flushes: Array<{ chain: string } | { set: string }>;
  /**
   * What the script does last, in its order: deletes chains and sets, and flushes those it
   * neither adds nor fills (a stale chain's rules go before the chain).
   */
  readonly last: Array<{ flush: boolean } & ({ chain: string } | { set: string })>;
}

/**
 * Applies `script` as one netlink transaction when it is a full sync of `options.table`: `add`
 * and `delete table`, then `add` and `flush` of chains, sets and maps, then rules and elements,
 * then `delete` of chains, sets and maps. Resolves false, having done nothing, for any other
 * script. Throws {@link NetlinkError} (errno 0 where netlink cannot be
 * used here) or {@link ElementCodecError} when it cannot write one it takes; nothing of the
 * script is then applied and the stage is gone.
 */
export async function applyOverNetlink(
  script: string,
  options: NetlinkApplyOptions,
): Promise<boolean> {
  const { table } = options;
  const stage = stageTableName(table);
  const split = splitScript(script, table, stage);
  if (!split) return false;
  const { plans, stageScript } = split;
  await options.runNft(stageScript);
  try {
    // The encoded elements take about as many bytes as their text: one buffer, never regrown.
    const batch = new BatchWriter(script.length + (1 << 16));
    batch.begin();
    for (const plan of plans) await writeFamily(batch, plan, table, stage);
    for (const plan of plans) {
      batch.message(MSG.delTable, FAMILY_NUMBERS[plan.family], 0, `delete table ${stage}`, (w) => {
        w.string(NFTA_TABLE_NAME, stage);
      });
    }
    batch.end();
    await sendBatch(batch.bytes(), batch.acks, (seq) => batch.describe(seq));
    return true;
  } catch (error) {
    // The stage hooks nothing; removing it is tidiness, and must not hide the error.
    await options.runNft(removeStageScript(plans, stage)).catch(() => {});
    throw error;
  }
}

/** The script removing the stage tables of `plans`, if present. */
function removeStageScript(plans: readonly FamilyPlan[], stage: string): string {
  return plans.map((p) => `add table ${p.family} ${stage}\ndelete table ${p.family} ${stage}\n`)
    .join("");
}

/**
 * The stage's script (the script's small part, renamed to the dormant stage table) and, per
 * family, what the batch adds itself; undefined when the script does more than create tables
 * of `table`.
 */
export function splitScript(
  script: string,
  table: string,
  stage: string,
): { plans: FamilyPlan[]; stageScript: string } | undefined {
  const plans = new Map<string, FamilyPlan>();
  const stageLines: string[] = [];
  /** Per family: 0 declaring (adds, flushes), 1 filling (rules, elements), 2 deleting. */
  const phases = new Map<string, number>();
  const anonymous = new Set<string>();
  /** `family chain NAME` / `family set NAME` the script adds or fills. */
  const touched = new Set<string>();
  let start = 0;
  while (start < script.length) {
    let end = script.indexOf("\n", start);
    if (end < 0) end = script.length;
    const line = script.slice(start, end);
    start = end + 1;
    if (line === "") continue;
    // `<verb> <object> <family> <table> …`: four words before the rest.
    const words = line.split(" ", 4);
    const [verb, object, family, name] = words;
    if (name !== table || !(family in FAMILY_NUMBERS)) return undefined;
    let plan = plans.get(family);
    if (!plan) {
      plan = {
        family,
        replace: false,
        chains: [],
        codecs: new Map(),
        elements: [],
        flushes: [],
        last: [],
      };
      plans.set(family, plan);
      phases.set(family, 0);
      stageLines.push(`add table ${family} ${stage}`, `delete table ${family} ${stage}`);
    }
    const rest = line.slice(verb.length + object.length + family.length + name.length + 4);
    const renamed = `${verb} ${object} ${family} ${stage}${rest ? ` ${rest}` : ""}`;
    const target = rest.split(" ", 1)[0];
    const phase = phases.get(family)!;
    const isSet = object === "set" || object === "map";
    if (object === "table") {
      if (phase > 0 || (verb === "delete" && rest !== "")) return undefined;
      if (verb === "delete") plan.replace = true;
      else if (verb !== "add") return undefined;
      else {
        const block = rest.startsWith("{ ") ? rest.slice(2) : "}";
        stageLines.push(`add table ${family} ${stage} { flags dormant; ${block}`);
      }
    } else if ((verb === "flush" || verb === "delete") && (object === "chain" || isSet)) {
      if (rest !== target) return undefined;
      const what = object === "chain" ? { chain: target } : { set: target };
      if (verb === "flush" && phase === 0) {
        plan.flushes.push(what);
        continue;
      }
      // Later, only what this script leaves alone otherwise: moved to the end, it keeps its order.
      if (touched.has(`${family} ${object === "chain" ? "chain" : "set"} ${target}`)) {
        return undefined;
      }
      if (verb === "delete") phases.set(family, 2);
      plan.last.push({ flush: verb === "flush", ...what });
    } else if (verb !== "add" || phase === 2) {
      return undefined;
    } else if (object === "chain") {
      if (phase > 0) return undefined;
      touched.add(`${family} chain ${target}`);
      plan.chains.push(target);
      stageLines.push(renamed);
    } else if (isSet) {
      if (phase > 0) return undefined;
      touched.add(`${family} set ${target}`);
      const open = rest.indexOf("{ ");
      const codec = open < 0 ? undefined : setCodec(rest.slice(open + 2, rest.lastIndexOf("}")));
      if (codec) plan.codecs.set(target, codec);
      else plan.codecs.delete(target);
      stageLines.push(renamed);
    } else if (object === "element") {
      phases.set(family, 1);
      touched.add(`${family} set ${target}`);
      const open = rest.indexOf(" { ");
      if (plan.codecs.has(target) && open >= 0 && rest.endsWith(" }")) {
        plan.elements.push({ set: target, list: rest.slice(open + 3, -2) });
      } else {
        stageLines.push(renamed);
      }
    } else if (object === "rule") {
      phases.set(family, 1);
      touched.add(`${family} chain ${target}`);
      // A set or map written in a rule becomes an anonymous set, named `__set0`… by the kernel.
      if (rest.includes("{")) anonymous.add(family);
      stageLines.push(renamed);
    } else {
      return undefined;
    }
  }
  for (const plan of plans.values()) {
    // Over a table that stays, new anonymous sets could take the names of those being let go.
    if (!plan.replace && anonymous.has(plan.family) && plan.flushes.length > 0) return undefined;
  }
  return { plans: [...plans.values()], stageScript: stageLines.join("\n") + "\n" };
}

/** One family's part of the batch: the table, then the stage's objects, then the elements. */
async function writeFamily(
  batch: BatchWriter,
  plan: FamilyPlan,
  table: string,
  stage: string,
): Promise<void> {
  const family = FAMILY_NUMBERS[plan.family];
  const where = `${plan.family} ${table}`;
  const [stageTable] = await requestObjects(MSG.getTable, plan.family, [
    stringAttr(NFTA_TABLE_NAME, stage),
  ], false);
  if (!stageTable) throw new NetlinkError(`the stage table ${plan.family} ${stage} is missing`, 2);
  if (plan.replace) {
    batch.message(MSG.newTable, family, NLM_F_CREATE, `add table ${where}`, (w) => {
      w.string(NFTA_TABLE_NAME, table);
    });
    batch.message(MSG.delTable, family, 0, `delete table ${where}`, (w) => {
      w.string(NFTA_TABLE_NAME, table);
    });
  }
  batch.message(MSG.newTable, family, NLM_F_CREATE, `add table ${where}`, (w) => {
    w.string(NFTA_TABLE_NAME, table);
    const userData = findAttr(stageTable, NFTA_TABLE_USERDATA);
    if (userData) w.appendAttr(userData);
  });
  for (const chain of plan.chains) {
    const [message] = await requestObjects(MSG.getChain, plan.family, [
      stringAttr(NFTA_TABLE, stage),
      stringAttr(NFTA_CHAIN_NAME, chain),
    ], false);
    if (!message) throw new NetlinkError(`the stage has no chain ${chain}`, 2);
    batch.message(MSG.newChain, family, NLM_F_CREATE, `add chain ${where} ${chain}`, (w) => {
      copyAttrs(w, message, table, (type, value) => {
        if (type === NFTA_CHAIN_FLAGS) {
          const flags = new DataView(value.buffer, value.byteOffset).getUint32(4, false);
          if ((flags & ~NFT_CHAIN_BASE) !== 0) {
            throw new ElementCodecError(`chain ${chain} has flags ${flags}`);
          }
          return false;
        }
        return DESCRIBING.chain.has(type);
      });
    });
  }
  const sets = await requestObjects(MSG.getSet, plan.family, [stringAttr(NFTA_TABLE, stage)], true);
  const stageSets: string[] = [];
  for (const message of sets) {
    const name = attributeText(findAttr(message, NFTA_SET_NAME));
    stageSets.push(name);
    batch.message(MSG.newSet, family, NLM_F_CREATE, `add set ${where} ${name}`, (w) => {
      copyAttrs(w, message, table, (type) => DESCRIBING.set.has(type));
      w.u32(NFTA_SET_ID, batch.nextSetId());
    });
  }
  // A re-sync's flushes, after the adds (which change nothing of what exists).
  for (const flush of plan.flushes) {
    writeNamed(batch, family, where, table, { flush: true, ...flush });
  }
  for (const name of stageSets) {
    if (plan.codecs.has(name)) continue;
    const answers = await requestObjects(MSG.getSetElem, plan.family, [
      stringAttr(NFTA_TABLE, stage),
      stringAttr(NFTA_SET_ELEM_LIST_SET, name),
    ], true);
    for (const message of answers) {
      if (!findAttr(message, NFTA_SET_ELEM_LIST_ELEMENTS)) continue;
      batch.message(MSG.newSetElem, family, NLM_F_CREATE, `add element ${where} ${name}`, (w) => {
        copyAttrs(w, message, table, (type) => DESCRIBING.elements.has(type));
      });
    }
  }
  for (const { set, list } of plan.elements) {
    writeElements(
      batch,
      family,
      `add element ${where} ${set}`,
      table,
      set,
      plan.codecs.get(set)!,
      list,
    );
  }
  const rules = await requestObjects(
    MSG.getRule,
    plan.family,
    [stringAttr(NFTA_TABLE, stage)],
    true,
  );
  for (const message of rules) {
    batch.message(MSG.newRule, family, NLM_F_CREATE | NLM_F_APPEND, `add rule ${where}`, (w) => {
      copyAttrs(w, message, table, (type) => DESCRIBING.rule.has(type));
    });
  }
  for (const step of plan.last) writeNamed(batch, family, where, table, step);
}

/**
 * A message naming one chain or set: a flush — every rule of a chain (DELRULE without a
 * handle), every element of a set (DELSETELEM without elements) — or a delete.
 */
function writeNamed(
  batch: BatchWriter,
  family: number,
  where: string,
  table: string,
  step: { flush: boolean } & ({ chain: string } | { set: string }),
): void {
  const name = "chain" in step ? step.chain : step.set;
  const [type, attr, verb] = "chain" in step
    ? step.flush
      ? [MSG.delRule, NFTA_RULE_CHAIN, "flush chain"]
      : [MSG.delChain, NFTA_CHAIN_NAME, "delete chain"]
    : step.flush
    ? [MSG.delSetElem, NFTA_SET_ELEM_LIST_SET, "flush set"]
    : [MSG.delSet, NFTA_SET_NAME, "delete set"];
  batch.message(type, family, 0, `${verb} ${where} ${name}`, (w) => {
    w.string(NFTA_TABLE, table);
    w.string(attr, name);
  });
}

/** NEWSETELEM messages for the formatted elements `list` of `set`, split by size. */
function writeElements(
  batch: BatchWriter,
  family: number,
  what: string,
  table: string,
  set: string,
  codec: SetCodec,
  list: string,
): void {
  const elements = splitElements(list);
  let next = elements.next();
  while (!next.done) {
    batch.message(MSG.newSetElem, family, NLM_F_CREATE, what, (w) => {
      w.string(NFTA_TABLE, table);
      w.string(NFTA_SET_ELEM_LIST_SET, set);
      const nested = w.open(NFTA_SET_ELEM_LIST_ELEMENTS);
      const limit = w.length + ELEMENT_BYTES_PER_MESSAGE;
      while (!next.done && w.length < limit) {
        writeElement(w, codec, next.value);
        next = elements.next();
      }
      w.close(nested);
    });
  }
}

/**
 * Copies a stage object's attributes (`message`, as the kernel dumped it) with its table
 * attribute naming `table` and only the attributes `keep` accepts.
 */
function copyAttrs(
  w: AttributeWriter,
  message: Uint8Array,
  table: string,
  keep: (type: number, attr: Uint8Array) => boolean,
): void {
  for (const [type, attr] of attributes(message)) {
    if (type === NFTA_TABLE) w.string(NFTA_TABLE, table);
    else if (keep(type, attr)) w.appendAttr(attr);
  }
}

/** The first top-level attribute of `type` in `message` (header included), or undefined. */
function findAttr(message: Uint8Array, type: number): Uint8Array | undefined {
  for (const [t, attr] of attributes(message)) if (t === type) return attr;
  return undefined;
}

/** One nf_tables batch being written: messages with sequence numbers, and what each was. */
class BatchWriter {
  readonly #out: AttributeWriter;
  readonly #what = new Map<number, string>();
  #seq = (Date.now() & 0x3fffffff) + 1;
  #setIds = 0;
  /** Messages the kernel will acknowledge. */
  acks = 0;

  constructor(capacity: number) {
    this.#out = new AttributeWriter(capacity);
  }

  begin(): void {
    this.#header(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, "the transaction", () => {});
  }

  end(): void {
    this.#header(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, "the transaction", () => {});
  }

  /** A message of type `type` (`NFT_MSG_*`) with attributes written by `attrs`. */
  message(
    type: number,
    family: number,
    flags: number,
    what: string,
    attrs: (w: AttributeWriter) => void,
  ): void {
    this.acks++;
    this.#header(
      (NFNL_SUBSYS_NFTABLES << 8) | type,
      NLM_F_REQUEST | NLM_F_ACK | flags,
      family,
      what,
      attrs,
    );
  }

  nextSetId(): number {
    return ++this.#setIds;
  }

  bytes(): Uint8Array {
    return this.#out.bytes();
  }

  describe(seq: number): string {
    return this.#what.get(seq) ?? `message ${seq}`;
  }

  #header(
    type: number,
    flags: number,
    family: number,
    what: string,
    attrs: (w: AttributeWriter) => void,
  ): void {
    const w = this.#out;
    const start = w.length;
    const seq = this.#seq++;
    this.#what.set(seq, what);
    w.zeros(20);
    w.setUint16(start + 4, type, true);
    w.setUint16(start + 6, flags, true);
    w.setUint32(start + 8, seq);
    w.buffer()[start + 16] = family; // nfgenmsg: family, version 0, resource id
    if (type === NFNL_MSG_BATCH_BEGIN || type === NFNL_MSG_BATCH_END) {
      w.setUint16(start + 18, NFNL_SUBSYS_NFTABLES, false);
    }
    attrs(w);
    w.setUint32(start, w.length - start);
  }
}
