/**
 * Reading a file from outside the process with a size limit, so that a file of any size — or
 * one that never ends, such as `/dev/zero` — costs at most the limit.
 *
 * @module
 */

/** A file is larger than the limit it was read with. */
export class InputTooLargeError extends Error {
  /** Always `"InputTooLargeError"`. */
  override name = "InputTooLargeError";
  /** The limit, in bytes. */
  readonly limit: number;

  /** The error for a file over `limit` bytes. */
  constructor(limit: number) {
    super(`larger than ${formatBytes(limit)}`);
    this.limit = limit;
  }
}

/** Chunk size of {@link readFileBounded}. */
const CHUNK = 1 << 20;

/**
 * The bytes of the file at `path`; throws {@link InputTooLargeError} as soon as more than
 * `maxBytes` have been read (a regular file over the limit is refused before it is read), and
 * Deno's own errors (NotFound, PermissionDenied, ...) as they are.
 *
 * @example
 * ```ts
 * const bytes = await readFileBounded("/etc/kube-proxy/config.conf", 1 << 20);
 * ```
 */
export async function readFileBounded(path: string, maxBytes: number): Promise<Uint8Array> {
  const file = await Deno.open(path, { read: true });
  try {
    const info = await file.stat();
    if (info.isFile && info.size > maxBytes) throw new InputTooLargeError(maxBytes);
    const chunks: Uint8Array[] = [];
    let total = 0;
    for (;;) {
      const chunk = new Uint8Array(Math.min(CHUNK, maxBytes + 1 - total));
      const n = await file.read(chunk);
      if (n === null) break;
      total += n;
      if (total > maxBytes) throw new InputTooLargeError(maxBytes);
      chunks.push(n === chunk.length ? chunk : chunk.subarray(0, n));
    }
    return chunks.length === 1 ? chunks[0] : concatBytes(chunks, total);
  } finally {
    file.close();
  }
}

/** `parts` one after the other in one array of `length` bytes (their total). */
export function concatBytes(parts: readonly Uint8Array[], length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let offset = 0;
  for (const part of parts) {
    bytes.set(part, offset);
    offset += part.length;
  }
  return bytes;
}

/** The text of the file at `path` (UTF-8, invalid bytes replaced), read as {@link readFileBounded}. */
export async function readTextFileBounded(path: string, maxBytes: number): Promise<string> {
  return new TextDecoder().decode(await readFileBounded(path, maxBytes));
}

/** `128 MiB`, `1 MiB`, `512 KiB`, `100 bytes`: a limit as people write it. */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (bytes >= size && bytes % size === 0) return `${bytes / size} ${unit}`;
  }
  return `${bytes} bytes`;
}
