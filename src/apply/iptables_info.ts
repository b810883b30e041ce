/**
 * The kernel's summary of one iptables-legacy table (`IPT_SO_GET_INFO`, `struct ipt_getinfo`):
 * how many entries and bytes its rule blob holds and where each built-in chain starts and ends,
 * read by one `getsockopt` through libc by Deno's FFI — no copy of the rules, so it costs the
 * same at 10 or 10,000 services. iptables-legacy replaces a table's whole blob on every change,
 * so a flushed chain, a deleted chain or a removed rule changes these numbers; the rules watch
 * (iptables_watch.ts) compares them to tell "nothing changed" from "look closer".
 *
 * Only reads, on a raw socket of the calling process's network namespace (needs CAP_NET_ADMIN,
 * as iptables does). Only iptables-legacy: iptables-nft tables are nftables tables, which this
 * call does not see.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import { canOpen, errnoName, HOST_LITTLE_ENDIAN, lastErrno, libcOpener } from "./libc.ts";

/** What the kernel says of one legacy table (the fields of `struct ipt_getinfo` but its name). */
export interface TableInfo {
  /** Bit mask of the built-in chains (hooks) the table has. */
  readonly validHooks: number;
  /** Byte offset of each hook's first rule (PREROUTING, INPUT, FORWARD, OUTPUT, POSTROUTING). */
  readonly hookEntry: readonly number[];
  /** Byte offset of each hook's policy rule. */
  readonly underflow: readonly number[];
  /** Rules in the table, counting each user chain's head and return. */
  readonly numEntries: number;
  /** Bytes of the table's rule blob. */
  readonly size: number;
}

/** The table could not be asked about: no FFI permission or libc (errno 0), or the kernel refused. */
export class TableInfoError extends Error {
  override name = "TableInfoError";
  /** The errno of the failing call (positive), or 0 when the kernel was not asked. */
  readonly errno: number;

  constructor(message: string, errno: number) {
    super(message);
    this.errno = errno;
  }
}

/** `sizeof(struct ipt_getinfo)` (and `ip6t_getinfo`, the same layout). */
export const TABLE_INFO_SIZE = 84;
const TABLE_NAME_LEN = 32;
const HOOKS = 5;

/**
 * The request buffer for `IPT_SO_GET_INFO`: the table name, NUL-padded to 32 bytes, and room
 * for the answer. Throws RangeError for a name that does not fit.
 */
export function tableInfoRequest(table: string): Uint8Array<ArrayBuffer> {
  const name = new TextEncoder().encode(table);
  if (name.length >= TABLE_NAME_LEN) {
    throw new RangeError(`table name ${table} is longer than ${TABLE_NAME_LEN - 1} bytes`);
  }
  const buffer = new Uint8Array(TABLE_INFO_SIZE);
  buffer.set(name);
  return buffer;
}

/** Reads the kernel's answer (native byte order, as the kernel wrote it); RangeError when short. */
export function parseTableInfo(buffer: Uint8Array, littleEndian = true): TableInfo {
  if (buffer.length < TABLE_INFO_SIZE) {
    throw new RangeError(`ipt_getinfo is ${TABLE_INFO_SIZE} bytes, got ${buffer.length}`);
  }
  const view = new DataView(buffer.buffer, buffer.byteOffset, TABLE_INFO_SIZE);
  const u32 = (offset: number) => view.getUint32(offset, littleEndian);
  const array = (offset: number) => Array.from({ length: HOOKS }, (_, i) => u32(offset + 4 * i));
  return {
    validHooks: u32(32),
    hookEntry: array(36),
    underflow: array(56),
    numEntries: u32(76),
    size: u32(80),
  };
}

/** Whether two answers describe the same table blob as far as these numbers can tell. */
export function sameTableInfo(a: TableInfo, b: TableInfo): boolean {
  return a.validHooks === b.validHooks && a.numEntries === b.numEntries && a.size === b.size &&
    a.hookEntry.every((v, i) => v === b.hookEntry[i]) &&
    a.underflow.every((v, i) => v === b.underflow[i]);
}

const AF_INET = 2;
const AF_INET6 = 10;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const IPPROTO_RAW = 255;
/** The `level` of iptables' socket options: IPPROTO_IP, or IPPROTO_IPV6 for ip6tables. */
const SOL_IP = 0;
const SOL_IPV6 = 41;
/** `IPT_SO_GET_INFO` and `IP6T_SO_GET_INFO` (`IPT_BASE_CTL` + 0). */
const SO_GET_INFO = 64;

const LIBC = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  getsockopt: { parameters: ["i32", "i32", "i32", "buffer", "buffer"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** libc, opened once; throws {@link TableInfoError} (errno 0) where FFI or libc is unavailable. */
const openLibc = libcOpener(
  LIBC,
  (reason) => new TableInfoError(`cannot load libc for iptables table info: ${reason}`, 0),
);

/**
 * Whether {@link readTableInfo} can be used from this process (FFI permitted, libc loadable);
 * without `--allow-ffi` the rules watch falls back to its full check.
 */
export function tableInfoAvailable(): boolean {
  return canOpen(openLibc);
}

/**
 * The kernel's summary of iptables-legacy table `table` (`nat`, `mangle`, …) of `family`, in
 * this process's network namespace. Throws {@link TableInfoError}: errno 0 when FFI or libc is
 * not available, ENOENT (2) when the table does not exist, EPERM without CAP_NET_ADMIN.
 *
 * @example
 * ```ts
 * const before = readTableInfo("IPv4", "nat");
 * // … someone runs `iptables-legacy -t nat -F` …
 * if (!sameTableInfo(before, readTableInfo("IPv4", "nat"))) console.log("nat changed");
 * ```
 */
export function readTableInfo(family: IPFamily, table: string): TableInfo {
  const c = openLibc().symbols;
  const v6 = family === "IPv6";
  const fd = c.socket(v6 ? AF_INET6 : AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
  if (fd < 0) throw errnoError(c, `cannot open a raw ${family} socket`);
  try {
    const buffer = tableInfoRequest(table);
    const length = new Uint32Array([TABLE_INFO_SIZE]);
    const level = v6 ? SOL_IPV6 : SOL_IP;
    if (c.getsockopt(fd, level, SO_GET_INFO, buffer, new Uint8Array(length.buffer)) < 0) {
      throw errnoError(c, `cannot read ${family} iptables table ${table}`);
    }
    return parseTableInfo(buffer, HOST_LITTLE_ENDIAN);
  } finally {
    c.close(fd);
  }
}

function errnoError(c: Deno.DynamicLibrary<typeof LIBC>["symbols"], what: string): Error {
  const errno = lastErrno(c.__errno_location);
  // errno 0 means "not asked"; a failed call always sets one, but never let it read as "no FFI".
  return new TableInfoError(`${what}: ${errnoName(errno)}`, errno === 0 ? -1 : errno);
}
