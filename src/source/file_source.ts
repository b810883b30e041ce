/**
 * The `--from-file` source: Nodes, ServiceCIDRs, Services and EndpointSlices read from a
 * multi-document YAML file, emitted as source events, and re-read whenever the file changes.
 *
 * Parsing is a pure function ({@link parseClusterFile}), run in a worker
 * ({@link parseClusterBytes}); {@link FileSource} owns the file watcher, the fallback poll and
 * the diff between two readings, so that downstream only ever sees the objects that really
 * changed. A file that cannot be parsed or read is logged and the objects read last stay in
 * force: a reading is applied completely or not at all.
 *
 * No file stops the event loop for long: it is read with a size limit, parsed in a worker with
 * a time limit (its aliases and nesting bounded, see `../bounded_yaml.ts`), and its changes are
 * emitted in slices of {@link DEFAULT_SLICE_MS} ms.
 *
 * @module
 */

import { formatBytes, InputTooLargeError, readFileBounded } from "../bounded_read.ts";
import type { ObjectKind, RawObject, Source, SourceHandler } from "./events.ts";
import {
  ClusterFileError,
  type ClusterObject,
  parseClusterFile,
  type ParsedClusterFile,
} from "./cluster_file.ts";
import { parseClusterBytes } from "./cluster_file_parse.ts";
import { DEFAULT_SLICE_MS, Slices } from "../slices.ts";

export { ClusterFileError, parseClusterFile };
export type { ClusterObject, ParsedClusterFile };

/**
 * The largest cluster file read by default: 128 MiB, three times a 50,000-Service cluster
 * (~40 MB of YAML).
 */
export const DEFAULT_MAX_FILE_BYTES = 128 * 2 ** 20;

/** Longest a cluster file's parse may take by default, ms. */
export const DEFAULT_PARSE_TIMEOUT_MS = 60_000;

/** Skipped documents logged per reading; the rest are counted in one more line. */
const MAX_SKIPPED_LINES = 100;

/** Quiet time after the last change notice before the file is re-read. */
const DEBOUNCE_MS = 100;

/** Longest a stream of change notices may postpone a re-read. */
const MAX_DEBOUNCE_MS = 1000;

/**
 * Kubernetes' atomic writer (ConfigMap and Secret volumes) swaps this symlink to publish new
 * content; the file itself is never touched, so a change of this name means "check the file".
 */
const ATOMIC_WRITER_LINK = "..data";

/** Options of {@link FileSource}. */
export interface FileSourceOptions {
  /**
   * How often, in milliseconds, the file's inode, size and times are checked as a fallback to
   * the directory watcher. Default 1000.
   */
  pollIntervalMs?: number;
  /** Where log lines go. Default `console.error`. */
  log?: (line: string) => void;
  /**
   * The largest file read, in bytes; a larger one is refused like a file that is not valid
   * YAML. Default {@link DEFAULT_MAX_FILE_BYTES}.
   */
  maxBytes?: number;
  /** Longest a parse may take, ms; then the reading fails. Default {@link DEFAULT_PARSE_TIMEOUT_MS}. */
  parseTimeoutMs?: number;
  /**
   * Reads the file's bytes, refusing more than `maxBytes` with InputTooLargeError (tests
   * substitute it). Default {@link readFileBounded}.
   */
  readFile?: (path: string, maxBytes: number) => Promise<Uint8Array>;
}

/**
 * What the source keeps of an accepted object between readings: not the object (the model has
 * taken what it needs), only what tells two readings apart and what a later event names.
 */
interface Entry {
  readonly kind: ObjectKind;
  /** Canonical JSON: equal content, equal text. */
  readonly json: string;
}

/**
 * A {@link Source} reading a cluster file (see {@link parseClusterFile} for its content).
 *
 * `start()` reads the file, emits an add per object, then `onSynced()` once; it throws
 * {@link ClusterFileError} when the file is missing, unreadable, larger than `maxBytes`, not
 * valid YAML (aliases and nesting bounded) or not parsed within `parseTimeoutMs`; `stop()` ends
 * it at once, whatever it is waiting for. Afterwards the
 * file's directory is watched (editors replace files by rename) and the file is polled every
 * `pollIntervalMs`; after ~100 ms of quiet the file is re-read and only differences are emitted:
 * an update for an object whose content changed (compared as canonical JSON, key order
 * ignored), an add for a new key, a delete for a vanished one. A file that fails to parse, or
 * that disappears, is logged once and changes nothing until it is readable again.
 *
 * @example
 * ```ts
 * const source = new FileSource("/etc/kube-nftproxy/cluster.yaml");
 * await source.start({
 *   onEvent: (event) => console.log(event.kind, event.previous ? "update/delete" : "add"),
 *   onSynced: () => console.log("synced"),
 * });
 * // ... later
 * await source.stop();
 * ```
 */
export class FileSource implements Source {
  readonly #path: string;
  readonly #dir: string;
  readonly #name: string;
  readonly #pollIntervalMs: number;
  readonly #log: (line: string) => void;
  readonly #maxBytes: number;
  readonly #parseTimeoutMs: number;
  readonly #readFile: (path: string, maxBytes: number) => Promise<Uint8Array>;
  /** Aborted by stop(): ends a parse in progress. */
  readonly #abort = new AbortController();

  #handler?: SourceHandler;
  #state = new Map<string, Entry>();
  #lastSignature?: string;
  #lastReadProblem?: string;
  #started = false;
  #stopped = false;

  #watcher?: Deno.FsWatcher;
  #watchLoop?: Promise<void>;
  #pollTimer?: ReturnType<typeof setTimeout>;
  #polling?: Promise<void>;
  #debounceTimer?: ReturnType<typeof setTimeout>;
  #debounceSince = 0;
  #reloading?: Promise<void>;
  #reloadAgain = false;

  /** Creates a source for the file at `path`; nothing happens until `start()`. */
  constructor(path: string, options: FileSourceOptions = {}) {
    const pollIntervalMs = options.pollIntervalMs ?? 1000;
    if (!Number.isFinite(pollIntervalMs) || pollIntervalMs <= 0) {
      throw new RangeError(`pollIntervalMs is ${pollIntervalMs}, must be a positive number`);
    }
    this.#path = path;
    const slash = path.lastIndexOf("/");
    this.#dir = slash < 0 ? "." : slash === 0 ? "/" : path.slice(0, slash);
    this.#name = path.slice(slash + 1);
    this.#pollIntervalMs = pollIntervalMs;
    this.#log = options.log ?? ((line) => console.error(line));
    this.#maxBytes = options.maxBytes ?? DEFAULT_MAX_FILE_BYTES;
    this.#parseTimeoutMs = options.parseTimeoutMs ?? DEFAULT_PARSE_TIMEOUT_MS;
    this.#readFile = options.readFile ?? readFileBounded;
  }

  /** Reads the file, emits its objects and `onSynced()`, then starts watching for changes. */
  async start(handler: SourceHandler): Promise<void> {
    if (this.#started) throw new Error(`FileSource for ${this.#path} was already started`);
    this.#started = true;
    const signature = await this.#signature();
    let bytes: Uint8Array;
    try {
      bytes = await this.#readFile(this.#path, this.#maxBytes);
    } catch (error) {
      throw new ClusterFileError(this.#readProblem(error), { file: this.#path, cause: error });
    }
    let parsed: ParsedClusterFile<string>;
    try {
      parsed = await this.#parse(bytes);
    } catch (error) {
      if (this.#stopped) return;
      throw error;
    }
    if (this.#stopped) return;
    this.#logSkipped(parsed.skipped);
    const { entries, changes } = reconcile(parsed.objects, new Map());
    this.#state = entries;
    this.#lastSignature = signature;
    this.#handler = handler;
    await this.#emit(changes);
    if (this.#stopped) return;
    handler.onSynced();
    this.#watch();
    // Catches a change made between the first stat and now, before the watcher was in place.
    this.#schedulePoll(0);
  }

  /** Stops watching, polling and parsing; resolves once nothing is running. No events follow. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#abort.abort(new Error(`the file source for ${this.#path} was stopped`));
    clearTimeout(this.#debounceTimer);
    this.#debounceTimer = undefined;
    clearTimeout(this.#pollTimer);
    this.#pollTimer = undefined;
    const watcher = this.#watcher;
    this.#watcher = undefined;
    if (watcher !== undefined) {
      try {
        watcher.close();
      } catch {
        // Already closed, e.g. after the watch failed; nothing left to release.
      }
    }
    await Promise.allSettled([this.#watchLoop, this.#polling, this.#reloading]);
  }

  #watch(): void {
    let watcher: Deno.FsWatcher;
    try {
      watcher = Deno.watchFs(this.#dir, { recursive: false });
    } catch (error) {
      this.#log(
        `cannot watch directory ${this.#dir} (${errorMessage(error)}); noticing changes to ` +
          `${this.#path} by polling every ${this.#pollIntervalMs} ms`,
      );
      return;
    }
    this.#watcher = watcher;
    this.#watchLoop = (async () => {
      try {
        for await (const event of watcher) {
          if (event.paths.some((p) => this.#concernsFile(p))) this.#scheduleReload();
        }
      } catch (error) {
        if (!this.#stopped) {
          this.#log(
            `watching directory ${this.#dir} failed (${errorMessage(error)}); noticing changes ` +
              `to ${this.#path} by polling every ${this.#pollIntervalMs} ms`,
          );
        }
      }
    })();
  }

  #concernsFile(path: string): boolean {
    const name = path.slice(path.lastIndexOf("/") + 1);
    return name === this.#name || name === ATOMIC_WRITER_LINK;
  }

  #schedulePoll(delayMs: number): void {
    if (this.#stopped) return;
    this.#pollTimer = setTimeout(() => {
      this.#pollTimer = undefined;
      this.#polling = this.#poll().finally(() => {
        this.#polling = undefined;
      });
    }, delayMs);
  }

  async #poll(): Promise<void> {
    const signature = await this.#signature();
    if (this.#stopped) return;
    const pending = this.#debounceTimer !== undefined || this.#reloading !== undefined;
    if (signature !== this.#lastSignature && !pending) this.#scheduleReload();
    this.#schedulePoll(this.#pollIntervalMs);
  }

  #scheduleReload(): void {
    if (this.#stopped) return;
    if (this.#debounceTimer !== undefined) {
      // A steady stream of notices must not postpone the re-read for ever.
      if (Date.now() - this.#debounceSince >= MAX_DEBOUNCE_MS) return;
      clearTimeout(this.#debounceTimer);
    } else {
      this.#debounceSince = Date.now();
    }
    this.#debounceTimer = setTimeout(() => {
      this.#debounceTimer = undefined;
      this.#runReload();
    }, DEBOUNCE_MS);
  }

  #runReload(): void {
    if (this.#stopped) return;
    if (this.#reloading !== undefined) {
      this.#reloadAgain = true;
      return;
    }
    this.#reloading = this.#reload()
      .catch((error) => {
        this.#log(`cannot apply the new content of ${this.#path}: ${errorMessage(error)}`);
      })
      .finally(() => {
        this.#reloading = undefined;
        if (this.#reloadAgain) {
          this.#reloadAgain = false;
          this.#scheduleReload();
        }
      });
  }

  async #reload(): Promise<void> {
    const before = await this.#signature();
    let bytes: Uint8Array;
    try {
      bytes = await this.#readFile(this.#path, this.#maxBytes);
    } catch (error) {
      if (this.#stopped) return;
      this.#lastSignature = before;
      const problem = error instanceof Deno.errors.NotFound
        ? `cluster file ${this.#path} has disappeared`
        : this.#readProblem(error);
      if (problem !== this.#lastReadProblem) {
        this.#log(`${problem}; keeping the ${this.#state.size} objects read last`);
        this.#lastReadProblem = problem;
      }
      return;
    }
    const after = await this.#signature();
    if (this.#stopped) return;
    if (after !== before) {
      // Still being written: read again once it is quiet, never apply a half-written file.
      this.#scheduleReload();
      return;
    }
    this.#lastSignature = before;
    if (this.#lastReadProblem !== undefined) {
      this.#log(`cluster file ${this.#path} can be read again`);
      this.#lastReadProblem = undefined;
    }
    let parsed: ParsedClusterFile<string>;
    try {
      parsed = await this.#parse(bytes);
    } catch (error) {
      if (this.#stopped) return;
      if (!(error instanceof ClusterFileError)) throw error;
      this.#log(`${error.message}; keeping the ${this.#state.size} objects read last`);
      return;
    }
    if (this.#stopped) return;
    this.#logSkipped(parsed.skipped);
    const { entries, changes } = reconcile(parsed.objects, this.#state);
    this.#state = entries;
    await this.#emit(changes);
  }

  #parse(bytes: Uint8Array): Promise<ParsedClusterFile<string>> {
    return parseClusterBytes(bytes, {
      source: this.#path,
      timeoutMs: this.#parseTimeoutMs,
      signal: this.#abort.signal,
      warn: this.#log,
    });
  }

  /** Emits `changes` in slices, so a large reading never holds the event loop; stops with the source. */
  async #emit(changes: readonly Change[]): Promise<void> {
    const handler = this.#handler;
    if (handler === undefined) return;
    const slices = new Slices(DEFAULT_SLICE_MS);
    for (const change of changes) {
      if (this.#stopped) return;
      const { kind, json } = change;
      const current = json === undefined ? undefined : JSON.parse(json) as RawObject;
      const previous = change.previous === undefined ? undefined : identity(kind, change.previous);
      handler.onEvent(previous === undefined ? { kind, current } : { kind, previous, current });
      await slices.pause();
    }
  }

  /** Why the file could not be read, as one line naming it. */
  #readProblem(error: unknown): string {
    if (error instanceof InputTooLargeError) {
      return `cannot read cluster file ${this.#path}: larger than ${formatBytes(error.limit)}, ` +
        "the most a cluster file may hold";
    }
    if (error instanceof Deno.errors.NotFound) {
      return `cannot read cluster file ${this.#path}: no such file`;
    }
    return `cannot read cluster file ${this.#path}: ${errorMessage(error)}`;
  }

  /** Identifies the file's current version cheaply: inode, size and times, or why it has none. */
  async #signature(): Promise<string> {
    try {
      const info = await Deno.stat(this.#path);
      return [info.ino, info.size, info.mtime?.getTime(), info.ctime?.getTime()].join(":");
    } catch (error) {
      return error instanceof Deno.errors.NotFound ? "missing" : `error:${errorMessage(error)}`;
    }
  }

  #logSkipped(skipped: readonly string[]): void {
    for (const line of skipped.slice(0, MAX_SKIPPED_LINES)) this.#log(`${this.#path}: ${line}`);
    if (skipped.length > MAX_SKIPPED_LINES) {
      this.#log(`${this.#path}: skipping ${skipped.length - MAX_SKIPPED_LINES} more documents`);
    }
  }
}

/**
 * The entries of a new reading and the changes that lead from `previous` to it: updates and
 * adds in the new file's order, then deletes in the old file's order. An object whose content
 * equals its entry in `previous` keeps that entry and gives no change.
 */
function reconcile(
  objects: ReadonlyMap<string, ClusterObject<string>>,
  previous: ReadonlyMap<string, Entry>,
): { entries: Map<string, Entry>; changes: Change[] } {
  const entries = new Map<string, Entry>();
  const changes: Change[] = [];
  for (const [key, { kind, object: json }] of objects) {
    const old = previous.get(key);
    if (old !== undefined && old.json === json) {
      entries.set(key, old);
      continue;
    }
    entries.set(key, { kind, json });
    changes.push({ kind, previous: old?.json, json });
  }
  for (const [key, old] of previous) {
    if (!objects.has(key)) changes.push({ kind: old.kind, previous: old.json });
  }
  return { entries, changes };
}

/**
 * One change of a new reading: its object is made from the JSON only as it is emitted, so a
 * reading is never held as objects all at once.
 */
interface Change {
  readonly kind: ObjectKind;
  /** The old content, absent for an add. */
  readonly previous?: string;
  /** The new content, absent for a delete. */
  readonly json?: string;
}

/** What a later event's `previous` carries of an object: its kind, apiVersion and name. */
function identity(kind: ObjectKind, json: string): RawObject {
  const object = JSON.parse(json) as RawObject;
  const metadata = isRecord(object.metadata) ? object.metadata : {};
  const { namespace, name } = metadata;
  return {
    kind,
    apiVersion: object.apiVersion,
    metadata: namespace === undefined ? { name } : { namespace, name },
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
