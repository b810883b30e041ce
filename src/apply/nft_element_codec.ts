/**
 * Elements as the kernel takes them: a set's declaration (`type …` / `typeof …`) read into
 * field codecs, and the script's formatted elements (`key comment "…" : value`) encoded into
 * netlink's element attributes, byte for byte what nft would send. Pure: no I/O.
 *
 * Only what the proxy's big maps use is encoded (IPv4 and IPv6 addresses, protocols, ports,
 * `numgen` indexes, verdicts, comments); a set with any other field, or with flags or timeouts,
 * is not codable here and stays with nft. Anything an encoder does not recognise throws
 * {@link ElementCodecError}, so a caller can hand the whole transaction to nft instead, which
 * gives the user its own error.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import { HOST_LITTLE_ENDIAN } from "./libc.ts";

/** An element or declaration this codec cannot encode as nft would. */
export class ElementCodecError extends Error {
  override name = "ElementCodecError";
}

/** How one field of a key or value is written. */
type FieldKind = "ipv4" | "ipv6" | "proto" | "service" | "u32";

/** The encoders of one set: its key's fields and its value's (fields or a verdict). */
export interface SetCodec {
  readonly key: readonly FieldKind[];
  /** The value's fields; `verdict` for a verdict map; none for a set. */
  readonly value: readonly FieldKind[] | "verdict" | undefined;
}

const TYPE_FIELDS: Record<string, FieldKind> = {
  ipv4_addr: "ipv4",
  ipv6_addr: "ipv6",
  inet_proto: "proto",
  inet_service: "service",
};

const TYPEOF_FIELDS: Record<string, FieldKind> = {
  "ip daddr": "ipv4",
  "ip saddr": "ipv4",
  "ip6 daddr": "ipv6",
  "ip6 saddr": "ipv6",
  "meta l4proto": "proto",
  "th dport": "service",
  "th sport": "service",
  "tcp dport": "service",
  "udp dport": "service",
  "sctp dport": "service",
};

const FIELD_BYTES: Record<FieldKind, number> = { ipv4: 4, ipv6: 16, proto: 1, service: 2, u32: 4 };

/**
 * The codec of a set declared with the block `body` of an `add set`/`add map` command (what is
 * between its braces), or undefined when its elements are not codable here: flags, timeouts,
 * or a field type this codec does not know.
 *
 * @example
 * ```ts
 * setCodec('type ipv4_addr . inet_proto . inet_service : verdict; counter; comment "x";');
 * // { key: ["ipv4", "proto", "service"], value: "verdict" }
 * ```
 */
export function setCodec(body: string): SetCodec | undefined {
  const clauses = body.split(";").map((c) => c.trim()).filter((c) => c !== "");
  const [declaration, ...rest] = clauses;
  if (!declaration) return undefined;
  for (const clause of rest) {
    if (clause !== "counter" && !clause.startsWith("comment ") && !clause.startsWith("size ")) {
      return undefined; // flags, timeouts, policies: nft's business
    }
  }
  const typeOf = declaration.startsWith("typeof ");
  if (!typeOf && !declaration.startsWith("type ")) return undefined;
  const [keyText, valueText, extra] = declaration.slice(typeOf ? 7 : 5).split(" : ");
  if (extra !== undefined) return undefined;
  const key = fields(keyText, typeOf);
  if (!key) return undefined;
  if (valueText === undefined) return { key, value: undefined };
  if (valueText.trim() === "verdict" && !typeOf) return { key, value: "verdict" };
  const value = fields(valueText, typeOf);
  return value ? { key, value } : undefined;
}

function fields(text: string, typeOf: boolean): FieldKind[] | undefined {
  const kinds: FieldKind[] = [];
  for (const raw of text.split(" . ")) {
    const name = raw.trim();
    const names = typeOf ? TYPEOF_FIELDS : TYPE_FIELDS;
    const kind = Object.hasOwn(names, name)
      ? names[name]
      : typeOf && /^numgen random mod \d+$/.test(name)
      ? "u32"
      : undefined;
    if (kind === undefined) return undefined;
    kinds.push(kind);
  }
  return kinds;
}

/** One element, split into its texts. */
export interface ElementText {
  readonly key: string;
  readonly comment: string | undefined;
  readonly value: string | undefined;
}

/**
 * Splits an `add element` command's list (between its braces) into its elements. Commas and
 * spaces inside a comment's quotes do not split; a malformed list throws.
 */
export function* splitElements(list: string): Generator<ElementText> {
  let at = 0;
  const end = list.length;
  while (at < end) {
    // The key runs to the first ` comment "`, ` : ` or `, ` (keys have no quotes; IPv6 ones
    // have colons, never between spaces).
    let stop = at;
    for (; stop < end; stop++) {
      const c = list.charCodeAt(stop);
      if (c === 0x2c /* , */ && list.charCodeAt(stop + 1) === 0x20) break;
      if (c !== 0x20 /* space */) continue;
      const next = list.charCodeAt(stop + 1);
      if (next === 0x3a /* : */ && list.charCodeAt(stop + 2) === 0x20) break;
      if (next === 0x63 /* c */ && list.startsWith(' comment "', stop)) break;
    }
    const key = list.slice(at, stop);
    let comment: string | undefined;
    if (list.startsWith(' comment "', stop)) {
      const close = list.indexOf('"', stop + 10);
      if (close < 0) throw new ElementCodecError(`an unterminated comment in ${excerpt(list, at)}`);
      comment = list.slice(stop + 10, close);
      stop = close + 1;
    }
    let value: string | undefined;
    if (list.startsWith(" : ", stop)) {
      let next = list.indexOf(", ", stop);
      if (next < 0) next = end;
      value = list.slice(stop + 3, next);
      stop = next;
    }
    if (stop < end && !list.startsWith(", ", stop)) {
      throw new ElementCodecError(`cannot read the element at ${excerpt(list, at)}`);
    }
    if (key === "") throw new ElementCodecError(`an element without a key at ${excerpt(list, at)}`);
    yield { key, comment, value };
    at = stop + 2;
  }
}

function excerpt(list: string, at: number): string {
  return JSON.stringify(list.slice(at, at + 60));
}

/** Writes netlink attributes into one growing buffer. */
export class AttributeWriter {
  #bytes: Uint8Array;
  #view: DataView;
  /** Bytes written so far. */
  length = 0;

  /** A writer with room for `capacity` bytes at first (it grows as needed). */
  constructor(capacity = 1 << 16) {
    this.#bytes = new Uint8Array(capacity);
    this.#view = new DataView(this.#bytes.buffer);
  }

  /** The bytes written, without copying (valid until the next write). */
  bytes(): Uint8Array {
    return this.#bytes.subarray(0, this.length);
  }

  /** The whole buffer, for writing up to a {@link reserve}d length; valid until the next write. */
  buffer(): Uint8Array {
    return this.#bytes;
  }

  /** Room for `n` more bytes. */
  reserve(n: number): void {
    if (this.length + n <= this.#bytes.length) return;
    let size = this.#bytes.length * 2;
    while (size < this.length + n) size *= 2;
    const bigger = new Uint8Array(size);
    bigger.set(this.#bytes.subarray(0, this.length));
    this.#bytes = bigger;
    this.#view = new DataView(bigger.buffer);
  }

  /** Starts a (nested) attribute; close it with {@link close}. */
  open(type: number, nested = true): number {
    this.reserve(4);
    const at = this.length;
    this.#view.setUint16(at + 2, nested ? type | 0x8000 : type, true);
    this.length += 4;
    return at;
  }

  /** Ends the attribute opened at `at`: its length, then padding to 4 bytes. */
  close(at: number): void {
    this.#view.setUint16(at, this.length - at, true);
    const padded = (this.length + 3) & ~3;
    this.reserve(padded - this.length);
    this.#bytes.fill(0, this.length, padded);
    this.length = padded;
  }

  /** An attribute holding `data`. */
  raw(type: number, data: Uint8Array): void {
    const at = this.open(type, false);
    this.reserve(data.length);
    this.#bytes.set(data, this.length);
    this.length += data.length;
    this.close(at);
  }

  /** A NUL-terminated string attribute. */
  string(type: number, text: string): void {
    this.raw(type, ENCODER.encode(`${text}\0`));
  }

  /** A 32-bit big-endian attribute (netlink's `be32`). */
  u32(type: number, value: number): void {
    const at = this.open(type, false);
    this.reserve(4);
    this.#view.setUint32(this.length, value >>> 0, false);
    this.length += 4;
    this.close(at);
  }

  /** Writes a 32-bit little-endian value at `at` (message lengths). */
  setUint32(at: number, value: number): void {
    this.#view.setUint32(at, value, true);
  }

  /** Writes a 16-bit value at `at` in `littleEndian` order. */
  setUint16(at: number, value: number, littleEndian: boolean): void {
    this.#view.setUint16(at, value, littleEndian);
  }

  /** Appends attribute `attr` (header included) and pads it to 4 bytes. */
  appendAttr(attr: Uint8Array): void {
    const padded = (attr.length + 3) & ~3;
    this.reserve(padded);
    this.#bytes.set(attr, this.length);
    this.#bytes.fill(0, this.length + attr.length, this.length + padded);
    this.length += padded;
  }

  /** Appends `data` as it is. */
  append(data: Uint8Array): void {
    this.reserve(data.length);
    this.#bytes.set(data, this.length);
    this.length += data.length;
  }

  /** Appends `n` zero bytes. */
  zeros(n: number): void {
    this.reserve(n);
    this.#bytes.fill(0, this.length, this.length + n);
    this.length += n;
  }

  /** Drops everything from `at` on. */
  truncate(at: number): void {
    this.length = at;
  }
}

const ENCODER = new TextEncoder();

const NFTA_LIST_ELEM = 1;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_SET_ELEM_DATA = 2;
const NFTA_SET_ELEM_USERDATA = 6;
const NFTA_DATA_VALUE = 1;
const NFTA_DATA_VERDICT = 2;
const NFTA_VERDICT_CODE = 1;
const NFTA_VERDICT_CHAIN = 2;
/** libnftnl's user-data record of an element comment. */
const UDATA_SET_ELEM_COMMENT = 0;
/** nft refuses longer comments. */
const MAX_COMMENT_BYTES = 128;

const VERDICT_CODES: Record<string, number> = {
  accept: 1,
  drop: 0,
  continue: -1,
  return: -5,
};
const CHAIN_VERDICTS: Record<string, number> = { jump: -3, goto: -4 };

const PROTOCOLS: Record<string, number> = { tcp: 6, udp: 17, sctp: 132, icmp: 1, "ipv6-icmp": 58 };

/**
 * Writes one element (`NFTA_LIST_ELEM`) of a set with `codec`: its key, its value and its
 * comment, as nft encodes them (concatenated fields each padded to 4 bytes, ports and
 * addresses in network order, `numgen` indexes in host order).
 */
export function writeElement(out: AttributeWriter, codec: SetCodec, element: ElementText): void {
  const listElem = out.open(NFTA_LIST_ELEM);
  const key = out.open(NFTA_SET_ELEM_KEY);
  writeFields(out, codec.key, element.key);
  out.close(key);
  if (codec.value === undefined) {
    if (element.value !== undefined) throw new ElementCodecError(`a set element with a value`);
  } else {
    if (element.value === undefined) throw new ElementCodecError(`a map element without a value`);
    const data = out.open(NFTA_SET_ELEM_DATA);
    if (codec.value === "verdict") out.append(verdictAttr(element.value));
    else writeFields(out, codec.value, element.value);
    out.close(data);
  }
  if (element.comment !== undefined) {
    const text = ENCODER.encode(`${element.comment}\0`);
    if (text.length - 1 > MAX_COMMENT_BYTES) {
      throw new ElementCodecError(`a comment longer than ${MAX_COMMENT_BYTES} bytes`);
    }
    const attr = out.open(NFTA_SET_ELEM_USERDATA, false);
    out.reserve(2 + text.length);
    const bytes = out.buffer();
    bytes[out.length] = UDATA_SET_ELEM_COMMENT;
    bytes[out.length + 1] = text.length;
    bytes.set(text, out.length + 2);
    out.length += 2 + text.length;
    out.close(attr);
  }
  out.close(listElem);
}

/** Verdicts already encoded: a map has a handful of distinct ones (`goto lb-tcp-3`). */
const VERDICTS = new Map<string, Uint8Array>();

/** The NFTA_DATA_VERDICT attribute of verdict `text` (`drop`, `goto CHAIN`, …). */
function verdictAttr(text: string): Uint8Array {
  let attr = VERDICTS.get(text);
  if (attr) return attr;
  const out = new AttributeWriter();
  const verdict = out.open(NFTA_DATA_VERDICT);
  const [word, chain, extra] = text.split(" ");
  if (chain === undefined && Object.hasOwn(VERDICT_CODES, word)) {
    out.u32(NFTA_VERDICT_CODE, VERDICT_CODES[word]);
  } else if (chain !== undefined && extra === undefined && Object.hasOwn(CHAIN_VERDICTS, word)) {
    // Printable, without quotes, commas, semicolons or braces.
    if (!/^[!#-+\--:<-z|~]{1,255}$/.test(chain)) {
      throw new ElementCodecError(`an unexpected chain name ${JSON.stringify(chain)}`);
    }
    out.u32(NFTA_VERDICT_CODE, CHAIN_VERDICTS[word]);
    out.string(NFTA_VERDICT_CHAIN, chain);
  } else {
    throw new ElementCodecError(`an unexpected verdict ${JSON.stringify(text)}`);
  }
  out.close(verdict);
  attr = out.bytes().slice();
  if (VERDICTS.size < 4096) VERDICTS.set(text, attr);
  return attr;
}

/** The fields of a key or value (`a . b . c`) as one NFTA_DATA_VALUE. */
function writeFields(out: AttributeWriter, kinds: readonly FieldKind[], text: string): void {
  const concatenated = kinds.length > 1;
  let size = 0;
  for (const kind of kinds) size += concatenated ? (FIELD_BYTES[kind] + 3) & ~3 : FIELD_BYTES[kind];
  const value = out.open(NFTA_DATA_VALUE, false);
  out.reserve(size);
  const bytes = out.buffer(); // valid: reserved above
  let at = out.length;
  bytes.fill(0, at, at + size);
  let from = 0;
  for (let i = 0; i < kinds.length; i++) {
    const last = i === kinds.length - 1;
    const separator = text.indexOf(" . ", from);
    if (last !== (separator < 0)) {
      throw new ElementCodecError(`${JSON.stringify(text)} has not ${kinds.length} fields`);
    }
    const to = last ? text.length : separator;
    writeField(bytes, at, kinds[i], text, from, to);
    at += concatenated ? (FIELD_BYTES[kinds[i]] + 3) & ~3 : FIELD_BYTES[kinds[i]];
    from = to + 3;
  }
  out.length = at;
  out.close(value);
}

/** Writes field `text[from, to)` of `kind` at `at` (read in place: no substring per field). */
function writeField(
  bytes: Uint8Array,
  at: number,
  kind: FieldKind,
  text: string,
  from: number,
  to: number,
): void {
  switch (kind) {
    case "ipv4":
      writeIPv4(bytes, at, text, from, to);
      return;
    case "ipv6": {
      const address = text.slice(from, to);
      if (!ipaddr.IPv6.isValid(address)) {
        throw new ElementCodecError(`${JSON.stringify(address)} is not an IPv6 address`);
      }
      if (address.includes("%")) {
        throw new ElementCodecError(`a zone in ${JSON.stringify(address)}`);
      }
      bytes.set(ipaddr.IPv6.parse(address).toByteArray(), at);
      return;
    }
    case "proto": {
      const first = text.charCodeAt(from);
      bytes[at] = first >= 0x30 && first <= 0x39
        ? decimal(text, from, to, 255)
        : protocol(text.slice(from, to));
      return;
    }
    case "service": {
      const port = decimal(text, from, to, 65535);
      bytes[at] = port >> 8;
      bytes[at + 1] = port & 0xff;
      return;
    }
    case "u32": {
      const n = decimal(text, from, to, 0xffffffff);
      // nft's integer data is in host order; the kernel's numgen writes it so.
      for (let i = 0; i < 4; i++) {
        bytes[at + (HOST_LITTLE_ENDIAN ? i : 3 - i)] = (n >>> (8 * i)) & 0xff;
      }
      return;
    }
  }
}

/** A protocol's number by the name nft prints. */
function protocol(name: string): number {
  const number = Object.hasOwn(PROTOCOLS, name) ? PROTOCOLS[name] : undefined;
  if (number === undefined) {
    throw new ElementCodecError(`${JSON.stringify(name)} is not a protocol`);
  }
  return number;
}

/** The decimal number `text[from, to)`, without sign or leading zeros, at most `max`. */
function decimal(text: string, from: number, to: number, max: number): number {
  const length = to - from;
  let ok = length > 0 && length <= 10 && (length === 1 || text.charCodeAt(from) !== 0x30);
  let n = 0;
  for (let i = from; ok && i < to; i++) {
    const c = text.charCodeAt(i) - 0x30;
    ok = c >= 0 && c <= 9;
    n = n * 10 + c;
  }
  if (!ok) throw new ElementCodecError(`${JSON.stringify(text.slice(from, to))} is not a number`);
  if (n > max) throw new ElementCodecError(`${text.slice(from, to)} is more than ${max}`);
  return n;
}

/** Dotted-quad IPv4 `text[from, to)`, strictly (four parts of 0–255, no leading zeros). */
function writeIPv4(bytes: Uint8Array, at: number, text: string, from: number, to: number): void {
  let part = 0;
  let value = 0;
  let digits = 0;
  let ok = to - from >= 7 && to - from <= 15;
  for (let i = from; ok && i <= to; i++) {
    const c = i < to ? text.charCodeAt(i) : 0x2e;
    if (c === 0x2e /* . */) {
      ok = digits > 0 && part < 4;
      bytes[at + part] = value;
      part++;
      value = 0;
      digits = 0;
    } else {
      ok = c >= 0x30 && c <= 0x39 && !(digits === 1 && value === 0);
      value = value * 10 + c - 0x30;
      digits++;
      ok &&= value <= 255;
    }
  }
  if (!ok || part !== 4) {
    throw new ElementCodecError(`${JSON.stringify(text.slice(from, to))} is not an IPv4 address`);
  }
}
