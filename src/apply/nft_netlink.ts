/**
 * Reading one set's elements (`NFT_MSG_GETSETELEM`) or one chain's rules (`NFT_MSG_GETRULE`)
 * straight from the kernel over netlink, through libc by Deno's FFI: no `nft` child, and none
 * of the whole-table cache nft builds before it prints anything (DESIGN §3). At 10k services
 * the dispatch map's 10k counters read in ~25 ms this way; `nft -j list map` takes 0.3 s of CPU
 * and 48 MB.
 *
 * Reads are one dump request, filtered by the kernel to one table and set or chain, on a socket of
 * the calling process's network namespace. {@link requestObjects} hands back what the kernel
 * answers as raw attributes, and {@link sendBatch} sends one whole transaction, for the full
 * sync written over netlink (nft_batch.ts), from a thread of Deno's own: the kernel applies a
 * transaction inside the write, and the event loop goes on meanwhile. Messages are built and
 * parsed here (netlink's type-length-value attributes, `linux/netfilter/nf_tables.h`).
 *
 * @module
 */
import { canOpen, errnoName, lastErrno, libcOpener } from "./libc.ts";
import { Slices } from "../slices.ts";

/** One element as the kernel dumps it. */
export interface KernelElement {
  /** The key's bytes (concatenated fields, each padded to 4 bytes). */
  readonly key: Uint8Array;
  /** The element's comment (`comment "…"` in nft), or empty. */
  readonly comment: string;
  /** Packets of the element's counter, when it has one. */
  readonly packets?: number;
}

/** The kernel could not be asked, or refused (the errno's name and number in the message). */
export class NetlinkError extends Error {
  override name = "NetlinkError";
  /** The errno the kernel answered with (positive), or 0 when it was not asked. */
  readonly errno: number;

  constructor(message: string, errno: number) {
    super(message);
    this.errno = errno;
  }
}

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_NETFILTER = 12;
const SOL_SOCKET = 1;
const SO_RCVTIMEO = 20;

const NLM_F_REQUEST = 0x1;
const NLM_F_ACK = 0x4;
const NLM_F_DUMP = 0x300;
const SO_SNDBUFFORCE = 32;
const SO_RCVBUFFORCE = 33;
const SOL_NETLINK = 270;
const NETLINK_CAP_ACK = 10;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLA_TYPE_MASK = 0x3fff;

const NFNL_SUBSYS_NFTABLES = 10;
const NFT_MSG_GETTABLE = 1;
const NFT_MSG_GETCHAIN = 4;
const NFT_MSG_GETRULE = 7;
const NFT_MSG_GETSETELEM = 13;
const NFTA_TABLE_NAME = 1;
const NFTA_CHAIN_TABLE = 1;
const NFTA_CHAIN_NAME = 3;
const NFTA_RULE_TABLE = 1;
const NFTA_RULE_CHAIN = 2;
const NFTA_RULE_EXPRESSIONS = 4;
const NFTA_IMMEDIATE_DATA = 2;
const NFTA_DATA_VERDICT = 2;
const NFTA_VERDICT_CHAIN = 2;
const NFTA_LOOKUP_SET = 1;
const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_LIST_ELEM = 1;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_SET_ELEM_USERDATA = 6;
const NFTA_SET_ELEM_EXPR = 7;
const NFTA_SET_ELEM_EXPRESSIONS = 11;
const NFTA_DATA_VALUE = 1;
const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;
const NFTA_COUNTER_PACKETS = 2;
/** libnftnl's user-data type of an element comment. */
const UDATA_SET_ELEM_COMMENT = 0;

/** netfilter's protocol family numbers of nft's table families. */
const FAMILIES: Record<string, number> = { ip: 2, ip6: 10, inet: 1 };

const LIBC = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  send: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  /**
   * `send` on a thread of Deno's own, for a transaction: the kernel applies it inside the call
   * (~0.25 s at 10k services, ~0.6 s at 50k), while health checks and scrapes go on being
   * answered. errno is that thread's: a failure is sent again with {@link LIBC.send} to name it.
   */
  sendInBackground: {
    name: "send",
    parameters: ["i32", "buffer", "usize", "i32"],
    result: "isize",
    nonblocking: true,
  },
  recv: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** libc, opened once; throws {@link NetlinkError} where FFI or libc is not available. */
const openLibc = libcOpener(
  LIBC,
  (reason) => new NetlinkError(`cannot load libc for netlink: ${reason}`, 0),
);

/**
 * Whether netlink can be used from this process (FFI permitted for libc, libc loadable); where
 * not, every function here throws {@link NetlinkError} with errno 0.
 */
export function netlinkAvailable(): boolean {
  return canOpen(openLibc);
}

/**
 * The elements of set or map `set` in table `family table`, as the kernel holds them; none
 * when the table or set does not exist. Throws {@link NetlinkError} when netlink cannot be used
 * here (no FFI permission, no libc, not Linux).
 *
 * @example
 * ```ts
 * const elements = await dumpSetElements("ip", "kube-nftproxy", "service-ips");
 * for (const e of elements) console.log(e.comment, e.packets);
 * ```
 */
export async function dumpSetElements(
  family: string,
  table: string,
  set: string,
): Promise<KernelElement[]> {
  const elements: KernelElement[] = [];
  const found = await dumpOrNone(NFT_MSG_GETSETELEM, family, [
    stringAttr(NFTA_SET_ELEM_LIST_TABLE, table),
    stringAttr(NFTA_SET_ELEM_LIST_SET, set),
  ], (view, start, end) => readElements(view, start, end, elements));
  return found ? elements : [];
}

/** What a rule does, as far as the rules check needs to know. */
export interface KernelRule {
  /** Chains the rule jumps or goes to (`immediate` verdicts). */
  readonly jumps: readonly string[];
  /** Sets and maps the rule looks up. */
  readonly lookups: readonly string[];
}

/**
 * The rules of chain `chain` in table `family table`, in order; none when the table or chain
 * does not exist (the kernel filters the dump by both). Throws {@link NetlinkError} when
 * netlink cannot be used here.
 */
export async function dumpRules(
  family: string,
  table: string,
  chain: string,
): Promise<KernelRule[]> {
  const rules: KernelRule[] = [];
  const found = await dumpOrNone(NFT_MSG_GETRULE, family, [
    stringAttr(NFTA_RULE_TABLE, table),
    stringAttr(NFTA_RULE_CHAIN, chain),
  ], (view, start, end) => {
    const expressions = find(view, start, end, NFTA_RULE_EXPRESSIONS);
    if (expressions >= 0) rules.push(readRule(view, expressions));
  });
  return found ? rules : [];
}

/**
 * Whether table `family table` exists (one get request, answered from that table alone: no
 * chain, set or element is read). Throws {@link NetlinkError} when netlink cannot be used here.
 */
export async function tableExists(family: string, table: string): Promise<boolean> {
  const found = await requestObjects(NFT_MSG_GETTABLE, family, [
    stringAttr(NFTA_TABLE_NAME, table),
  ], false);
  return found.length > 0;
}

/**
 * Whether chain `chain` exists in table `family table` (one get request, answered from that
 * chain alone). Throws {@link NetlinkError} when netlink cannot be used here.
 */
export async function chainExists(family: string, table: string, chain: string): Promise<boolean> {
  const found = await requestObjects(NFT_MSG_GETCHAIN, family, [
    stringAttr(NFTA_CHAIN_TABLE, table),
    stringAttr(NFTA_CHAIN_NAME, chain),
  ], false);
  return found.length > 0;
}

/** {@link dump}, resolving false when the kernel answers ENOENT (no such table, set or chain). */
async function dumpOrNone(...args: Parameters<typeof dump>): Promise<boolean> {
  try {
    await dump(...args);
    return true;
  } catch (error) {
    if (error instanceof NetlinkError && error.errno === 2) return false;
    throw error;
  }
}

/**
 * `viaNetlink` while netlink can be used from here, else — for good, from the first time it
 * cannot (no FFI permission, no libc) — `fallback`. Other errors are thrown as they are.
 */
export function netlinkOr<T>(
  viaNetlink: () => Promise<T>,
  fallback: () => Promise<T>,
): () => Promise<T> {
  let usable = true;
  return async () => {
    if (usable) {
      try {
        return await viaNetlink();
      } catch (error) {
        if (!(error instanceof NetlinkError) || error.errno !== 0) throw error;
        usable = false;
      }
    }
    return await fallback();
  };
}

/**
 * Sends one dump request and hands each answering message's attributes (`[start, end)` of
 * `view`) to `onMessage`, until the dump ends.
 */
async function dump(
  type: number,
  family: string,
  attrs: readonly Uint8Array[],
  onMessage: (view: DataView, start: number, end: number) => void,
  flags = NLM_F_DUMP,
): Promise<void> {
  const c = openLibc().symbols;
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) throw errnoError(c, "cannot open a netfilter netlink socket");
  try {
    // A reply always comes at once; never wait for ever on a wedged kernel.
    const timeout = new BigInt64Array([2n, 0n]); // struct timeval: 2 s
    c.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, new Uint8Array(timeout.buffer), 16);
    const seq = Date.now() >>> 0;
    const request = dumpRequest(type, FAMILIES[family] ?? 0, attrs, seq, flags);
    if (Number(c.send(fd, request, BigInt(request.length), 0)) !== request.length) {
      throw errnoError(c, "cannot send the netlink request");
    }
    const buffer = new Uint8Array(1 << 17);
    // Each read blocks for a moment only (~0.2 ms in the kernel, ~1 ms with its parsing); the
    // daemon's servers get a turn once a slice is used up. (A turn costs ~2 ms of waiting in
    // Deno's timers: one every eight reads made a 10k-element dump ~9 ms longer.)
    const slices = new Slices();
    for (let reads = 0; reads < 1_000_000; reads++) {
      const n = Number(c.recv(fd, buffer, BigInt(buffer.length), 0));
      if (n < 0) throw errnoError(c, "cannot read the netlink answer");
      if (readMessages(buffer.subarray(0, n), seq, onMessage)) return;
      await slices.pause();
    }
    throw new NetlinkError("the netlink answer did not end", 0);
  } finally {
    c.close(fd);
  }
}

/** The dump request for one set's elements. */
export function getSetElementsRequest(
  family: number,
  table: string,
  set: string,
  seq: number,
): Uint8Array {
  return dumpRequest(NFT_MSG_GETSETELEM, family, [
    stringAttr(NFTA_SET_ELEM_LIST_TABLE, table),
    stringAttr(NFTA_SET_ELEM_LIST_SET, set),
  ], seq);
}

function dumpRequest(
  type: number,
  family: number,
  attrs: readonly Uint8Array[],
  seq: number,
  flags = NLM_F_DUMP,
): Uint8Array {
  const length = 16 + 4 + attrs.reduce((sum, a) => sum + a.length, 0);
  const message = new Uint8Array(length);
  const view = new DataView(message.buffer);
  view.setUint32(0, length, true);
  view.setUint16(4, (NFNL_SUBSYS_NFTABLES << 8) | type, true);
  view.setUint16(6, NLM_F_REQUEST | flags, true);
  view.setUint32(8, seq, true);
  view.setUint32(12, 0, true);
  message[16] = family; // nfgenmsg: family, version 0, resource id 0
  let offset = 20;
  for (const attr of attrs) {
    message.set(attr, offset);
    offset += attr.length;
  }
  return message;
}

/**
 * What the kernel answers a get request of `type` (`NFT_MSG_GET…`) with `attrs`: each message's
 * attributes (after its netlink and nfgenmsg headers), copied. A dump when `dump`, else the
 * one object the attributes name (none when it does not exist). Throws {@link NetlinkError}.
 */
export async function requestObjects(
  type: number,
  family: string,
  attrs: readonly Uint8Array[],
  dump: boolean,
): Promise<Uint8Array[]> {
  const messages: Uint8Array[] = [];
  const found = await dumpOrNone(type, family, attrs, (view, start, end) => {
    messages.push(bytes(view, start, end).slice());
  }, dump ? NLM_F_DUMP : NLM_F_ACK);
  return found ? messages : [];
}

/**
 * Sends one nf_tables batch (`batch`: BEGIN, the messages, END, each message that wants an
 * answer flagged NLM_F_ACK) in one write and waits for the kernel's answers: resolves once
 * every one of the `acks` flagged messages was acknowledged, the transaction committed. Throws
 * {@link NetlinkError} naming the message (`describe(seq)`) the kernel refused first; the
 * kernel then applied nothing.
 */
export async function sendBatch(
  batch: Uint8Array,
  acks: number,
  describe: (seq: number) => string,
): Promise<void> {
  const c = openLibc().symbols;
  const fd = c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) throw errnoError(c, "cannot open a netfilter netlink socket");
  try {
    const int = (n: number) => new Uint8Array(new Int32Array([n]).buffer);
    // One write holds the whole transaction; answers are headers only (no echo of the request).
    if (c.setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, int(batch.length + (1 << 16)), 4) < 0) {
      throw errnoError(c, "cannot size the netlink send buffer");
    }
    // The kernel queues every ack before the first is read (it applies the transaction inside
    // the write): ~0.8 KB of receive buffer each (it doubles what is asked: 1 MB held ~2,700),
    // or the answer is lost to ENOBUFS though the transaction committed.
    c.setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, int(Math.max(1 << 20, acks * 1024)), 4);
    c.setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, int(1), 4);
    const timeout = new BigInt64Array([30n, 0n]); // struct timeval: a commit takes < 1 s
    c.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, new Uint8Array(timeout.buffer), 16);
    const size = BigInt(batch.length);
    // A netlink write is delivered whole or not at all: one that failed delivered nothing, and
    // is made again here, where errno can be read.
    if (
      Number(await c.sendInBackground(fd, batch, size, 0)) !== batch.length &&
      Number(c.send(fd, batch, size, 0)) !== batch.length
    ) {
      throw errnoError(c, "cannot send the transaction");
    }
    const buffer = new Uint8Array(1 << 16);
    let acked = 0;
    while (acked < acks) {
      const n = Number(c.recv(fd, buffer, BigInt(buffer.length), 0));
      if (n < 0) throw errnoError(c, `no answer to the transaction (${acked} of ${acks} acks)`);
      const view = new DataView(buffer.buffer, 0, n);
      for (let at = 0; at + 20 <= n; at += align(view.getUint32(at, true) || n)) {
        if (view.getUint16(at + 4, true) !== NLMSG_ERROR) continue;
        const errno = -view.getInt32(at + 16, true);
        if (errno !== 0) {
          const seq = view.getUint32(at + 28, true); // the refused message's header follows
          throw new NetlinkError(
            `the kernel refused ${describe(seq)}: ${errnoName(errno)} (${errno})`,
            errno,
          );
        }
        acked++;
      }
    }
  } finally {
    c.close(fd);
  }
}

/** The jumps and lookups of the rule whose NFTA_RULE_EXPRESSIONS attribute starts at `at`. */
function readRule(view: DataView, at: number): KernelRule {
  const jumps: string[] = [];
  const lookups: string[] = [];
  const end = at + view.getUint16(at, true);
  for (let e = at + 4; e + 4 <= end; e = next(view, e)) {
    if (type4(view, e) !== NFTA_LIST_ELEM) continue;
    const exprEnd = e + view.getUint16(e, true);
    const name = find(view, e + 4, exprEnd, NFTA_EXPR_NAME);
    const data = find(view, e + 4, exprEnd, NFTA_EXPR_DATA);
    if (name < 0 || data < 0) continue;
    const kind = text(view, name + 4, name + view.getUint16(name, true));
    const dataEnd = data + view.getUint16(data, true);
    if (kind === "lookup") {
      const set = find(view, data + 4, dataEnd, NFTA_LOOKUP_SET);
      if (set >= 0) lookups.push(text(view, set + 4, set + view.getUint16(set, true)));
    } else if (kind === "immediate") {
      const value = find(view, data + 4, dataEnd, NFTA_IMMEDIATE_DATA);
      if (value < 0) continue;
      const verdict = find(view, value + 4, value + view.getUint16(value, true), NFTA_DATA_VERDICT);
      if (verdict < 0) continue;
      const verdictEnd = verdict + view.getUint16(verdict, true);
      const chain = find(view, verdict + 4, verdictEnd, NFTA_VERDICT_CHAIN);
      if (chain >= 0) jumps.push(text(view, chain + 4, chain + view.getUint16(chain, true)));
    }
  }
  return { jumps, lookups };
}

/**
 * Hands every answering message in `data` to `onMessage` (its attributes: `[start, end)` of
 * the view); true once the dump's end (`NLMSG_DONE`) was read. Throws {@link NetlinkError} on
 * an error message.
 */
export function readMessages(
  data: Uint8Array,
  seq: number,
  onMessage: (view: DataView, start: number, end: number) => void,
): boolean {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let offset = 0;
  while (offset + 16 <= data.length) {
    const length = view.getUint32(offset, true);
    const type = view.getUint16(offset + 4, true);
    if (length < 16 || offset + length > data.length) {
      throw new NetlinkError("a truncated netlink message", 0);
    }
    if (view.getUint32(offset + 8, true) === seq) {
      if (type === NLMSG_DONE) return true;
      if (type === NLMSG_ERROR) {
        const errno = -view.getInt32(offset + 16, true);
        if (errno === 0) return true;
        throw new NetlinkError(`the kernel refused: ${errnoName(errno)} (${errno})`, errno);
      }
      // 16 bytes of header, 4 of nfgenmsg, then the attributes.
      onMessage(view, offset + 20, offset + length);
    }
    offset += align(length);
  }
  return false;
}

/** Appends the elements of one GETSETELEM answer (attributes in `[start, end)`) to `out`. */
export function readElements(
  view: DataView,
  start: number,
  end: number,
  out: KernelElement[],
): void {
  const elements = find(view, start, end, NFTA_SET_ELEM_LIST_ELEMENTS);
  if (elements < 0) return;
  const listEnd = elements + view.getUint16(elements, true);
  for (let at = elements + 4; at + 4 <= listEnd; at = next(view, at)) {
    if (type4(view, at) === NFTA_LIST_ELEM) out.push(element(view, at));
  }
}

/** The element whose NFTA_LIST_ELEM attribute starts at `at`. */
function element(view: DataView, at: number): KernelElement {
  let key = new Uint8Array();
  let comment = "";
  let packets: number | undefined;
  const end = at + view.getUint16(at, true);
  for (let a = at + 4; a + 4 <= end; a = next(view, a)) {
    const type = type4(view, a);
    if (type === NFTA_SET_ELEM_KEY) {
      const value = find(view, a + 4, a + view.getUint16(a, true), NFTA_DATA_VALUE);
      if (value >= 0) key = bytes(view, value + 4, value + view.getUint16(value, true)).slice();
    } else if (type === NFTA_SET_ELEM_USERDATA) {
      comment = userDataComment(view, a + 4, a + view.getUint16(a, true));
    } else if (type === NFTA_SET_ELEM_EXPR) {
      packets ??= counterPackets(view, a);
    } else if (type === NFTA_SET_ELEM_EXPRESSIONS) {
      const listEnd = a + view.getUint16(a, true);
      for (let e = a + 4; e + 4 <= listEnd; e = next(view, e)) {
        if (type4(view, e) === NFTA_LIST_ELEM) packets ??= counterPackets(view, e);
      }
    }
  }
  return packets === undefined ? { key, comment } : { key, comment, packets };
}

/** The packets of the counter expression whose attribute starts at `at`, or undefined. */
function counterPackets(view: DataView, at: number): number | undefined {
  const end = at + view.getUint16(at, true);
  const name = find(view, at + 4, end, NFTA_EXPR_NAME);
  if (name < 0 || !isText(view, name + 4, name + view.getUint16(name, true), COUNTER)) {
    return undefined;
  }
  const data = find(view, at + 4, end, NFTA_EXPR_DATA);
  if (data < 0) return 0;
  const packets = find(view, data + 4, data + view.getUint16(data, true), NFTA_COUNTER_PACKETS);
  if (packets < 0 || view.getUint16(packets, true) < 12) return 0;
  // Big-endian 64 bits, as two halves: no BigInt per element.
  return view.getUint32(packets + 4, false) * 2 ** 32 + view.getUint32(packets + 8, false);
}

/** The name of the counter expression. */
const COUNTER = new TextEncoder().encode("counter");

/** Whether `[start, end)` holds the string `expected` (ASCII), NUL-terminated or not. */
function isText(view: DataView, start: number, end: number, expected: Uint8Array): boolean {
  const length = expected.length;
  if (end - start < length || (end - start > length && view.getUint8(start + length) !== 0)) {
    return false;
  }
  for (let i = 0; i < length; i++) {
    if (view.getUint8(start + i) !== expected[i]) return false;
  }
  return true;
}

/** The comment in libnftnl's element user data (type, length, value records). */
function userDataComment(view: DataView, start: number, end: number): string {
  for (let offset = start; offset + 2 <= end;) {
    const type = view.getUint8(offset);
    const length = view.getUint8(offset + 1);
    if (type === UDATA_SET_ELEM_COMMENT) return text(view, offset + 2, offset + 2 + length);
    offset += 2 + length;
  }
  return "";
}

/** Where the first attribute of `type` in `[start, end)` starts, or -1. */
function find(view: DataView, start: number, end: number, type: number): number {
  for (let at = start; at + 4 <= end; at = next(view, at)) {
    if (type4(view, at) === type) return at;
  }
  return -1;
}

/** The attribute after the one at `at` (past the end when it is malformed). */
function next(view: DataView, at: number): number {
  const length = view.getUint16(at, true);
  return length < 4 ? Number.MAX_SAFE_INTEGER : at + align(length);
}

/** An attribute's type, without the nested and byte-order flags. */
function type4(view: DataView, at: number): number {
  return view.getUint16(at + 2, true) & NLA_TYPE_MASK;
}

function bytes(view: DataView, start: number, end: number): Uint8Array {
  return new Uint8Array(view.buffer, view.byteOffset + start, Math.max(0, end - start));
}

/**
 * A NUL-terminated ASCII/UTF-8 string in `[start, end)`. ASCII (every name and comment the
 * proxy writes) is read here; only other text goes to a TextDecoder, whose call costs more than
 * a short name: a scrape reads 10,000 comments at 10k services.
 */
function text(view: DataView, start: number, end: number): string {
  let stop = start;
  let ascii = true;
  for (; stop < end; stop++) {
    const byte = view.getUint8(stop);
    if (byte === 0) break;
    if (byte >= 0x80) ascii = false;
  }
  if (!ascii) return DECODER.decode(bytes(view, start, stop));
  return String.fromCharCode.apply(null, bytes(view, start, stop) as unknown as number[]);
}

const DECODER = new TextDecoder();

/**
 * The top-level attributes of one message's attribute bytes (as {@link requestObjects} hands
 * them back): each one's type (without the nested and byte-order flags) and its bytes, header
 * included, unpadded. Throws {@link NetlinkError} on a malformed one.
 */
export function* attributes(message: Uint8Array): Generator<[type: number, attr: Uint8Array]> {
  const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
  for (let at = 0; at + 4 <= message.length; at += align(view.getUint16(at, true))) {
    const length = view.getUint16(at, true);
    if (length < 4 || at + length > message.length) {
      throw new NetlinkError("a malformed attribute in the kernel's answer", 0);
    }
    yield [type4(view, at), message.subarray(at, at + length)];
  }
}

/** The text of string attribute `attr` (header included), or empty when there is none. */
export function attributeText(attr: Uint8Array | undefined): string {
  if (attr === undefined) return "";
  return text(new DataView(attr.buffer, attr.byteOffset, attr.byteLength), 4, attr.length);
}

/** A NUL-terminated string attribute, padded. */
export function stringAttr(type: number, text: string): Uint8Array {
  const bytes = new TextEncoder().encode(text);
  const length = 4 + bytes.length + 1;
  const attr = new Uint8Array(align(length));
  const view = new DataView(attr.buffer);
  view.setUint16(0, length, true);
  view.setUint16(2, type, true);
  attr.set(bytes, 4);
  return attr;
}

function align(n: number): number {
  return (n + 3) & ~3;
}

function errnoError(c: Deno.DynamicLibrary<typeof LIBC>["symbols"], what: string): NetlinkError {
  const errno = lastErrno(c.__errno_location);
  return new NetlinkError(`${what}: ${errnoName(errno)} (${errno})`, errno);
}
