/**
 * Parsing a cluster file's bytes into each object's canonical JSON without stopping the event
 * loop: the work happens in a worker (`cluster_file_worker.ts`), the main thread only takes in
 * its answers, one batch per event-loop turn. The parse is bounded in time (the worker is terminated), and
 * ends at once when its signal aborts.
 *
 * Where no worker can be started (a `deno compile`d binary built without
 * `--include src/source/cluster_file_worker.ts`), the file is parsed on the main thread instead,
 * with one warning per process.
 *
 * @module
 */
import {
  canonicalJson,
  ClusterFileError,
  type ClusterObject,
  parseClusterFile,
  type ParsedClusterFile,
} from "./cluster_file.ts";
import type { ObjectKind } from "./events.ts";

/** What the main thread sends the worker: the file's bytes and its name. */
export interface ParseRequest {
  readonly bytes: Uint8Array;
  readonly source: string;
}

/**
 * What the worker answers, to the request and to each `"more"` after it: a batch of objects as
 * flat (key, kind, canonical JSON) triples, the last one with the skipped lines; or the
 * ClusterFileError that ended the parse; or, for a bug, the stack of what was thrown.
 */
export type ParseReply =
  | { entries: string[]; skipped?: string[] }
  | { error: { message: string; line?: number; column?: number } }
  | { crash: string };

/** Options of {@link parseClusterBytes}. */
export interface ParseClusterBytesOptions {
  /** The file name used in messages. */
  source: string;
  /** Longest a parse may take, ms; then it fails with ClusterFileError. */
  timeoutMs: number;
  /** Ends the parse at once (the promise rejects with the signal's reason). */
  signal?: AbortSignal;
  /** Where the one warning about a missing worker goes. */
  warn: (line: string) => void;
}

/** A worker could not be started here; every later parse runs on the main thread. */
let workerUnavailable = false;

/**
 * Parses a cluster file's bytes (UTF-8; invalid sequences become U+FFFD) into each accepted
 * object's {@link canonicalJson}, in a worker. Rejects with {@link ClusterFileError} when the text is not a valid cluster file or
 * the parse takes longer than `timeoutMs`.
 *
 * @example
 * ```ts
 * const parsed = await parseClusterBytes(await Deno.readFile("cluster.yaml"), {
 *   source: "cluster.yaml",
 *   timeoutMs: 60_000,
 *   warn: console.error,
 * });
 * parsed.objects.size;
 * ```
 */
export async function parseClusterBytes(
  bytes: Uint8Array,
  options: ParseClusterBytesOptions,
): Promise<ParsedClusterFile<string>> {
  options.signal?.throwIfAborted();
  if (!workerUnavailable) {
    try {
      return await parseInWorker(bytes, options);
    } catch (error) {
      if (!(error instanceof WorkerUnavailableError)) throw error;
      workerUnavailable = true;
      options.warn(
        `cannot start a worker to parse cluster files (${error.message}); parsing them on the ` +
          "main thread, which stops everything else while a large file is parsed",
      );
    }
  }
  const text = new TextDecoder().decode(bytes);
  return parseClusterFile(text, {
    source: options.source,
    keep: (_kind, object) => canonicalJson(object),
  });
}

/** The worker failed before answering: its module could not be loaded. */
class WorkerUnavailableError extends Error {}

function parseInWorker(
  bytes: Uint8Array,
  options: ParseClusterBytesOptions,
): Promise<ParsedClusterFile<string>> {
  const { source, timeoutMs, signal } = options;
  const worker = new Worker(new URL("./cluster_file_worker.ts", import.meta.url), {
    type: "module",
    name: "cluster-file-parser",
  });
  const objects = new Map<string, ClusterObject<string>>();
  let answered = false;
  return new Promise<ParsedClusterFile<string>>((resolve, reject) => {
    const finish = (settle: () => void) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", abort);
      worker.terminate();
      settle();
    };
    const abort = () => finish(() => reject(signal!.reason));
    const timer = setTimeout(() => {
      finish(() =>
        reject(
          new ClusterFileError(
            `cannot parse cluster file ${source}: not done after ${timeoutMs / 1000} s`,
            { file: source },
          ),
        )
      );
    }, timeoutMs);
    signal?.addEventListener("abort", abort, { once: true });
    worker.onmessage = ({ data }: MessageEvent<ParseReply>) => {
      answered = true;
      if ("crash" in data) {
        finish(() => reject(new Error(`the cluster file parser failed: ${data.crash}`)));
      } else if ("error" in data) {
        const { message, line, column } = data.error;
        finish(() => reject(new ClusterFileError(message, { file: source, line, column })));
      } else {
        const { entries, skipped } = data;
        for (let i = 0; i < entries.length; i += 3) {
          objects.set(entries[i], { kind: entries[i + 1] as ObjectKind, object: entries[i + 2] });
        }
        if (skipped !== undefined) finish(() => resolve({ objects, skipped }));
        else worker.postMessage("more");
      }
    };
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      const error = answered
        ? new Error(`the cluster file parser failed: ${event.message}`)
        : new WorkerUnavailableError(event.message);
      finish(() => reject(error));
    };
    // Copied, not transferred: the main thread parses them itself if the worker cannot start.
    worker.postMessage({ bytes, source } satisfies ParseRequest);
  });
}
