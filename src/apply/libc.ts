/**
 * libc through Deno's FFI, for the modules that ask the kernel directly (nft_netlink.ts,
 * iptables_info.ts): opening it, reading `errno` after a failed call and naming it, and the
 * host's byte order.
 *
 * @module
 */

/** The names of the errnos the kernel answers these callers with. */
const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM",
  2: "ENOENT",
  11: "EAGAIN",
  13: "EACCES",
  16: "EBUSY",
  17: "EEXIST",
  22: "EINVAL",
  23: "ENFILE",
  28: "ENOSPC",
  34: "ERANGE",
  90: "EMSGSIZE",
  92: "ENOPROTOOPT",
  93: "EPROTONOSUPPORT",
  95: "EOPNOTSUPP",
  97: "EAFNOSUPPORT",
  105: "ENOBUFS",
};

/**
 * Where libc is looked for, in order: the absolute paths of the usual layouts first — FFI
 * permission granted for one file (`--allow-ffi=/lib/x86_64-linux-gnu/libc.so.6`, as the
 * container image does) covers that exact path only, not the bare name the loader resolves —
 * then the bare names, which any `--allow-ffi` without a path covers.
 */
export function libcCandidates(arch: string = Deno.build.arch): string[] {
  return [
    `/lib/${arch}-linux-gnu/libc.so.6`,
    `/usr/lib/${arch}-linux-gnu/libc.so.6`,
    "/lib64/libc.so.6",
    "/usr/lib64/libc.so.6",
    "/usr/lib/libc.so.6",
    "libc.so.6",
    "libc.so",
  ];
}

/**
 * libc with `symbols` (the first of {@link libcCandidates} that opens), or, where FFI is not
 * permitted or no libc loads, an Error saying what the first path and the bare names answered
 * (the caller turns it into its own "not available" error).
 */
export function dlopenLibc<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
): Deno.DynamicLibrary<S> {
  const errors: string[] = [];
  const candidates = libcCandidates();
  for (const [i, name] of candidates.entries()) {
    try {
      return Deno.dlopen(name, symbols);
    } catch (error) {
      if (i === 0 || !name.startsWith("/")) errors.push(`${name}: ${(error as Error).message}`);
    }
  }
  throw new Error(errors.join("; "));
}

/**
 * A function that opens libc with `symbols` on its first successful call and returns that one
 * handle from then on; where it cannot be opened, it throws what `fail` makes of the reason.
 */
export function libcOpener<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
  fail: (reason: string) => Error,
): () => Deno.DynamicLibrary<S> {
  let library: Deno.DynamicLibrary<S> | undefined;
  return () => {
    try {
      return library ??= dlopenLibc(symbols);
    } catch (error) {
      throw fail((error as Error).message);
    }
  };
}

/**
 * Whether `open` (a {@link libcOpener}'s function) opens libc from this process: FFI permitted
 * (for any path, or for one of {@link libcCandidates}) and libc loadable.
 */
export function canOpen(open: () => unknown): boolean {
  try {
    open();
    return true;
  } catch {
    return false;
  }
}

/** Whether this machine stores integers little-endian (the kernel's "host order"). */
export const HOST_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The calling thread's `errno`, read through libc's `__errno_location()` (0 when unknown). */
export function lastErrno(errnoLocation: () => Deno.PointerValue): number {
  const pointer = errnoLocation();
  return pointer === null ? 0 : new Deno.UnsafePointerView(pointer).getInt32();
}

/** `EPERM` for 1, …; `errno N` for one without a name here. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}
