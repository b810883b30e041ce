/**
 * The `--from-file` source: Nodes, ServiceCIDRs, Services and EndpointSlices read from a
 * multi-document YAML file, emitted as source events, and re-read whenever the file changes.
 *
 * Parsing is a pure function ({@link parseClusterFile}); {@link FileSource} owns the file
 * watcher, the fallback poll and the diff between two readings, so that downstream only ever
 * sees the objects that really changed. A file that cannot be parsed or read is logged and the
 * objects read last stay in force: a reading is applied completely or not at all.
 *
 * @module
 */

import { loadAll, YAMLException } from "js-yaml";
import type { ObjectEvent, ObjectKind, RawObject, Source, SourceHandler } from "./events.ts";
import { isClusterScoped, objectKey } from "./object_key.ts";

/** The apiVersions accepted for each kind the proxy uses; other pairs are skipped. */
const API_VERSIONS: Readonly<Record<ObjectKind, readonly string[]>> = {
  Node: ["v1"],
  Service: ["v1"],
  EndpointSlice: ["discovery.k8s.io/v1"],
  ServiceCIDR: ["networking.k8s.io/v1", "networking.k8s.io/v1beta1"],
};

/** Quiet time after the last change notice before the file is re-read. */
const DEBOUNCE_MS = 100;

/** Longest a stream of change notices may postpone a re-read. */
const MAX_DEBOUNCE_MS = 1000;

/**
 * Kubernetes' atomic writer (ConfigMap and Secret volumes) swaps this symlink to publish new
 * content; the file itself is never touched, so a change of this name means "check the file".
 */
const ATOMIC_WRITER_LINK = "..data";

/** One object read from a cluster file, with the kind it was accepted as. */
export interface ClusterObject {
  /** The kind the object was accepted as. */
  kind: ObjectKind;
  /** The object as parsed, namespace defaulted. */
  object: RawObject;
}

/** What {@link parseClusterFile} found in a cluster file. */
export interface ParsedClusterFile {
  /** The accepted objects by {@link objectKey}, in file order. */
  objects: Map<string, ClusterObject>;
  /** One human-readable line per skipped document, List item or overridden duplicate. */
  skipped: string[];
}

/** Options of {@link parseClusterFile}. */
export interface ParseClusterFileOptions {
  /** The file name used in error messages. Default `"<cluster file>"`. */
  source?: string;
}

/**
 * A cluster file could not be read or is not valid YAML. `line` and `column` (1-based) locate a
 * syntax error when the parser reported one; `cause` carries the underlying error.
 */
export class ClusterFileError extends Error {
  /** Always `"ClusterFileError"`. */
  override name = "ClusterFileError";
  /** The file that failed. */
  readonly file: string;
  /** 1-based line of a syntax error, when known. */
  readonly line?: number;
  /** 1-based column of a syntax error, when known. */
  readonly column?: number;

  /** Creates the error; `options.file` names the file, `cause` the underlying error. */
  constructor(
    message: string,
    options: { file: string; line?: number; column?: number; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.file = options.file;
    this.line = options.line;
    this.column = options.column;
  }
}

/**
 * Parses the text of a cluster file: a multi-document YAML stream whose documents are
 * `v1 Node`, `networking.k8s.io/v1` (or `v1beta1`) `ServiceCIDR`, `v1 Service`,
 * `discovery.k8s.io/v1 EndpointSlice`, or a `v1 List` of those (flattened). Empty documents are
 * ignored. Anything else — other kinds or apiVersions, non-objects, objects without
 * `metadata.name` — is left out with one line in `skipped`. A namespaced object without
 * `metadata.namespace` is put in `default`, as `kubectl apply` does. When two documents have the
 * same key the last one wins and the earlier one is reported in `skipped`.
 *
 * Throws {@link ClusterFileError} naming the file, line and column when the text is not valid
 * YAML (including duplicate mapping keys). The YAML 1.2 core schema is used, so timestamps stay
 * strings and the result is plain JSON data.
 *
 * @example
 * ```ts
 * const { objects, skipped } = parseClusterFile(
 *   "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n",
 *   { source: "cluster.yaml" },
 * );
 * objects.get("Node/node-a")?.kind; // "Node"
 * skipped.length; // 0
 * ```
 */
export function parseClusterFile(
  text: string,
  options: ParseClusterFileOptions = {},
): ParsedClusterFile {
  const source = options.source ?? "<cluster file>";
  let documents: unknown[];
  try {
    documents = loadAll(text, { filename: source });
  } catch (error) {
    throw syntaxError(source, error);
  }
  const objects = new Map<string, ClusterObject>();
  const origins = new Map<string, string>();
  const skipped: string[] = [];
  const accept = (where: string, kind: ObjectKind, object: RawObject): void => {
    const key = objectKey(kind, object);
    if (key === undefined) {
      skipped.push(`skipping ${where} (${describe(object)}): ${identityProblem(object)}`);
      return;
    }
    const earlier = origins.get(key);
    if (earlier !== undefined) {
      skipped.push(
        `skipping ${earlier} (${describe(objects.get(key)!.object)}): ${where} has the same ` +
          `key ${key}, the last one wins`,
      );
      objects.delete(key);
    }
    objects.set(key, { kind, object });
    origins.set(key, where);
  };
  const visit = (where: string, value: unknown): void => {
    if (!isRecord(value)) {
      skipped.push(`skipping ${where}: not a Kubernetes object but ${typeName(value)}`);
      return;
    }
    const { apiVersion, kind } = value;
    if (apiVersion === "v1" && kind === "List") {
      const items = value.items ?? [];
      if (!Array.isArray(items)) {
        skipped.push(`skipping ${where} (v1 List): items is ${typeName(items)}, not a list`);
        return;
      }
      items.forEach((item, i) => visit(`${where} item ${i + 1}`, item));
      return;
    }
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      skipped.push(`skipping ${where} (${describe(value)}): apiVersion and kind must be strings`);
      return;
    }
    if (!isObjectKind(kind)) {
      skipped.push(`skipping ${where} (${describe(value)}): kind not used by the proxy`);
      return;
    }
    const versions = API_VERSIONS[kind];
    if (!versions.includes(apiVersion)) {
      skipped.push(
        `skipping ${where} (${describe(value)}): apiVersion ${apiVersion} is not supported for ` +
          `${kind}, use ${versions.join(" or ")}`,
      );
      return;
    }
    accept(where, kind, defaultNamespace(kind, value));
  };
  documents.forEach((document, i) => {
    if (document !== null && document !== undefined) visit(`document ${i + 1}`, document);
  });
  return { objects, skipped };
}

/** Options of {@link FileSource}. */
export interface FileSourceOptions {
  /**
   * How often, in milliseconds, the file's inode, size and times are checked as a fallback to
   * the directory watcher. Default 1000.
   */
  pollIntervalMs?: number;
  /** Where log lines go. Default `console.error`. */
  log?: (line: string) => void;
  /** Reads the file's text (tests substitute it). Default `Deno.readTextFile`. */
  readFile?: (path: string) => Promise<string>;
}

/** An accepted object with its canonical JSON, the form two readings are compared in. */
interface Entry extends ClusterObject {
  json: string;
}

/**
 * A {@link Source} reading a cluster file (see {@link parseClusterFile} for its content).
 *
 * `start()` reads the file, emits an add per object, then `onSynced()` once; it throws
 * {@link ClusterFileError} when the file is missing, unreadable or not valid YAML. Afterwards the
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
  readonly #readFile: (path: string) => Promise<string>;

  #handler?: SourceHandler;
  #state = new Map<string, Entry>();
  #lastText?: string;
  #lastSignature?: string;
  #readProblem?: string;
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
    this.#readFile = options.readFile ?? ((p) => Deno.readTextFile(p));
  }

  /** Reads the file, emits its objects and `onSynced()`, then starts watching for changes. */
  async start(handler: SourceHandler): Promise<void> {
    if (this.#started) throw new Error(`FileSource for ${this.#path} was already started`);
    this.#started = true;
    const signature = await this.#signature();
    let text: string;
    try {
      text = await this.#readFile(this.#path);
    } catch (error) {
      throw new ClusterFileError(
        `cannot read cluster file ${this.#path}: ${errorMessage(error)}`,
        { file: this.#path, cause: error },
      );
    }
    const parsed = parseClusterFile(text, { source: this.#path });
    if (this.#stopped) return;
    this.#logSkipped(parsed.skipped);
    this.#state = toEntries(parsed.objects, new Map());
    this.#lastText = text;
    this.#lastSignature = signature;
    this.#handler = handler;
    for (const entry of this.#state.values()) {
      handler.onEvent({ kind: entry.kind, current: entry.object });
    }
    handler.onSynced();
    this.#watch();
    // Catches a change made between the first stat and now, before the watcher was in place.
    this.#schedulePoll(0);
  }

  /** Stops watching and polling; resolves once nothing is running. No events follow. */
  async stop(): Promise<void> {
    this.#stopped = true;
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
    let text: string;
    try {
      text = await this.#readFile(this.#path);
    } catch (error) {
      if (this.#stopped) return;
      this.#lastSignature = before;
      const problem = error instanceof Deno.errors.NotFound
        ? `cluster file ${this.#path} has disappeared`
        : `cannot read cluster file ${this.#path}: ${errorMessage(error)}`;
      if (problem !== this.#readProblem) {
        this.#log(`${problem}; keeping the ${this.#state.size} objects read last`);
        this.#readProblem = problem;
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
    if (this.#readProblem !== undefined) {
      this.#log(`cluster file ${this.#path} can be read again`);
      this.#readProblem = undefined;
    }
    if (text === this.#lastText) return;
    this.#lastText = text;
    let parsed: ParsedClusterFile;
    try {
      parsed = parseClusterFile(text, { source: this.#path });
    } catch (error) {
      if (!(error instanceof ClusterFileError)) throw error;
      this.#log(`${error.message}; keeping the ${this.#state.size} objects read last`);
      return;
    }
    this.#logSkipped(parsed.skipped);
    const next = toEntries(parsed.objects, this.#state);
    const events = diffEntries(this.#state, next);
    this.#state = next;
    const handler = this.#handler;
    if (handler === undefined) return;
    for (const event of events) handler.onEvent(event);
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
    for (const line of skipped) this.#log(`${this.#path}: ${line}`);
  }
}

/**
 * Canonical JSON of `objects`; an object whose content equals its entry in `previous` keeps the
 * previous entry, so a later `previous` is the very object emitted earlier as `current`.
 */
function toEntries(
  objects: ReadonlyMap<string, ClusterObject>,
  previous: ReadonlyMap<string, Entry>,
): Map<string, Entry> {
  const entries = new Map<string, Entry>();
  for (const [key, { kind, object }] of objects) {
    const json = canonicalJson(object);
    const old = previous.get(key);
    entries.set(key, old !== undefined && old.json === json ? old : { kind, object, json });
  }
  return entries;
}

/** Updates and adds in the new file's order, then deletes in the old file's order. */
function diffEntries(
  previous: ReadonlyMap<string, Entry>,
  current: ReadonlyMap<string, Entry>,
): ObjectEvent[] {
  const events: ObjectEvent[] = [];
  for (const [key, entry] of current) {
    const old = previous.get(key);
    if (old === undefined) {
      events.push({ kind: entry.kind, current: entry.object });
    } else if (old.json !== entry.json) {
      events.push({ kind: entry.kind, previous: old.object, current: entry.object });
    }
  }
  for (const [key, old] of previous) {
    if (!current.has(key)) events.push({ kind: old.kind, previous: old.object });
  }
  return events;
}

/** JSON with every object's keys sorted, so equal content gives equal text. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (!isRecord(v)) return v;
    // fromEntries defines own properties, so a "__proto__" key stays data.
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]));
  });
}

function syntaxError(source: string, error: unknown): ClusterFileError {
  if (error instanceof YAMLException) {
    const mark = error.mark;
    if (mark !== undefined) {
      const line = mark.line + 1;
      const column = mark.column + 1;
      return new ClusterFileError(
        `cannot parse cluster file ${source}: line ${line}, column ${column}: ${error.reason}`,
        { file: source, line, column, cause: error },
      );
    }
    return new ClusterFileError(`cannot parse cluster file ${source}: ${error.reason}`, {
      file: source,
      cause: error,
    });
  }
  return new ClusterFileError(`cannot parse cluster file ${source}: ${errorMessage(error)}`, {
    file: source,
    cause: error,
  });
}

/** Namespaced objects without a namespace land in `default`, as with `kubectl apply`. */
function defaultNamespace(kind: ObjectKind, object: RawObject): RawObject {
  if (isClusterScoped(kind) || !isRecord(object.metadata)) return object;
  const namespace = object.metadata.namespace;
  if (namespace !== undefined && namespace !== null && namespace !== "") return object;
  return { ...object, metadata: { ...object.metadata, namespace: "default" } };
}

function identityProblem(object: RawObject): string {
  const metadata = object.metadata;
  if (!isRecord(metadata)) return "metadata is missing";
  if (typeof metadata.name !== "string" || metadata.name === "") {
    return "metadata.name is missing or empty";
  }
  return "metadata.namespace must be a string";
}

/** `apps/v1 Deployment default/web`, with `?` for what is missing. */
function describe(object: RawObject): string {
  const apiVersion = typeof object.apiVersion === "string" ? object.apiVersion : "?";
  const kind = typeof object.kind === "string" ? object.kind : "?";
  const metadata: Record<string, unknown> = isRecord(object.metadata) ? object.metadata : {};
  const name = typeof metadata.name === "string" && metadata.name !== ""
    ? metadata.name
    : "<no name>";
  const namespace = typeof metadata.namespace === "string" && metadata.namespace !== "" &&
      !(isObjectKind(kind) && isClusterScoped(kind))
    ? `${metadata.namespace}/`
    : "";
  return `${apiVersion} ${kind} ${namespace}${name}`;
}

function isObjectKind(kind: string): kind is ObjectKind {
  return Object.hasOwn(API_VERSIONS, kind);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
