/**
 * Parsing a cluster file's bytes into each object's canonical JSON without stopping the event
 * loop: the work happens in workers (`cluster_file_worker.ts`), the main thread only takes in
 * their answers, one batch per event-loop turn. The parse is bounded in time (the workers are
 * terminated), and ends at once when its signal aborts.
 *
 * A large file is cut in two at a `---` line near its middle and each part parsed in its own
 * worker, then joined so that the result is the one parsing it whole gives: objects in file
 * order, the later of two documents with one key winning (with its skipped line where it
 * would be), document and line numbers counted in the whole file, one alias budget. A file the
 * cut could misread (directives, `...` ends, content after `---`, CRLF `---` lines, a single
 * document such as a `v1 List`) is parsed whole, in one worker.
 *
 * Where no worker can be started (a `deno compile`d binary built without
 * `--include src/source/cluster_file_worker.ts`), the file is parsed on the main thread instead,
 * with one warning per process.
 *
 * @module
 */
import { AliasBudget } from "../bounded_yaml.ts";
import {
  canonicalJson,
  ClusterFileError,
  type ClusterObject,
  type ClusterTextScan,
  type ObjectOrigin,
  overriddenLine,
  parseClusterFile,
  type ParsedClusterFile,
} from "./cluster_file.ts";
import type { ObjectKind } from "./events.ts";

/**
 * What the main thread sends a worker: the bytes of a whole file, parsed at once; or with `part`,
 * bytes whose first `end` are a part, scanned, then parsed when `parse` says where it sits (or,
 * with `whole`, all the bytes parsed as one file after all); then, for joining parts, the keys
 * whose {@link ObjectOrigin} (`origins`) or first acceptance (`firsts`) it wants.
 */
export type ParseRequest =
  | { bytes: Uint8Array; source: string; part?: { end: number } }
  | { parse: { documentsBefore: number; linesBefore: number; aliasLimit: number } }
  | { whole: true }
  | { origins: string[] }
  | { firsts: string[] };

/** What a worker reports of a part it scanned: the scan, and the text's length. */
export type PartScan = ClusterTextScan & { length: number };

/** The end of a parse: the skipped lines, the documents read and the alias values used. */
export interface ParseEnd {
  skipped: string[];
  documents: number;
  aliasesUsed: number;
}

/**
 * What a worker answers: first, that it is ready (its module loaded); to a part, its scan; to a parse, batches of the objects accepted as it
 * goes, as flat (key, kind, canonical JSON) triples in the order accepted (a key again when a
 * later document overrides it), the last one with how the parse ended; or the ClusterFileError
 * that ended the parse; or, for a bug, the stack of what was thrown; and to `origins` and
 * `firsts`, those of the keys asked for (`firsts` in first-acceptance order).
 */
export type ParseReply =
  | { ready: true }
  | { scanned: PartScan }
  | { entries: string[]; last?: ParseEnd }
  | { origins: ObjectOrigin[] }
  | { firsts: { key: string; where: string; skippedBefore: number }[] }
  | { error: { message: string; line?: number; column?: number } }
  | { crash: string };

/**
 * Files larger than this many bytes are cut in two parts parsed side by side. Measured with
 * generated clusters (parseClusterBytes alone, 2 cores, load 1.3-2.4): at 19 MB two parts take
 * 680 ms instead of 890, at 9.4 MB 440 instead of 500, at 5.7 MB about the same, at 1.9 MB 320
 * instead of 210; the second worker costs ~100-190 ms of CPU more whatever the size.
 */
export const SPLIT_ABOVE = 8_000_000;

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
  /** Files larger than this many bytes are parsed in two parts. Default {@link SPLIT_ABOVE}. */
  splitAbove?: number;
  /** Told how many parts the file was parsed in (1 or 2), once it is: for tests. */
  parts?: (count: number) => void;
}

/** A worker could not be started here; every later parse runs on the main thread. */
let workerUnavailable = false;

/**
 * Parses a cluster file's bytes (UTF-8; invalid sequences become U+FFFD) into each accepted
 * object's {@link canonicalJson}, in a worker (two for a large file). Rejects with
 * {@link ClusterFileError} when the text is not a valid cluster file or the parse takes longer
 * than `timeoutMs`. The bytes are handed over, not copied: once a worker has started, `bytes`
 * is empty (its buffer transferred); pass a copy to keep them.
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
      return await parseInWorkers(bytes, options);
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
  const parsed = parseClusterFile(text, {
    source: options.source,
    keep: (_kind, object) => canonicalJson(object),
  });
  options.parts?.(1);
  return parsed;
}

/** The worker failed before answering: its module could not be loaded. */
class WorkerUnavailableError extends Error {}

/** The worker's answers did not follow the protocol: a bug. */
function unexpected(reply: ParseReply): Error {
  return new Error(`the cluster file parser answered ${JSON.stringify(reply).slice(0, 200)}`);
}

/**
 * One parser worker. Its answers are queued: {@link ParserWorker.next} resolves with the next
 * one (each taken in from the worker in an event-loop turn of its own), or rejects with the
 * ClusterFileError it reported, or with why it failed.
 */
class ParserWorker {
  readonly #worker: Worker;
  readonly #source: string;
  #answered = false;
  #failure: Error | undefined;
  readonly #replies: ParseReply[] = [];
  #waiting: { resolve: (reply: ParseReply) => void; reject: (error: Error) => void } | undefined;

  /** Starts a worker parsing the file named `source`. */
  constructor(source: string) {
    this.#source = source;
    this.#worker = new Worker(new URL("./cluster_file_worker.ts", import.meta.url), {
      type: "module",
      name: "cluster-file-parser",
    });
    this.#worker.onmessage = ({ data }: MessageEvent<ParseReply>) => {
      this.#answered = true;
      const waiting = this.#waiting;
      this.#waiting = undefined;
      if (waiting === undefined) this.#replies.push(data);
      else this.#settle(data, waiting);
    };
    this.#worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      this.#failure = this.#answered
        ? new Error(`the cluster file parser failed: ${event.message}`)
        : new WorkerUnavailableError(event.message);
      this.#waiting?.reject(this.#failure);
      this.#waiting = undefined;
    };
  }

  /** Resolves once the worker has loaded; rejects with WorkerUnavailableError if it cannot. */
  async ready(): Promise<void> {
    const reply = await this.next();
    if (!("ready" in reply)) throw unexpected(reply);
  }

  /** Sends `request` (transferring `transfer`) and resolves with the next answer. */
  ask(request: ParseRequest, transfer: Transferable[] = []): Promise<ParseReply> {
    this.#worker.postMessage(request, transfer);
    return this.next();
  }

  /** The next answer, queued or still to come. */
  next(): Promise<ParseReply> {
    return new Promise((resolve, reject) => {
      const reply = this.#replies.shift();
      if (reply !== undefined) this.#settle(reply, { resolve, reject });
      else if (this.#failure !== undefined) reject(this.#failure);
      else this.#waiting = { resolve, reject };
    });
  }

  #settle(
    reply: ParseReply,
    { resolve, reject }: { resolve: (reply: ParseReply) => void; reject: (error: Error) => void },
  ): void {
    if ("crash" in reply) {
      reject(new Error(`the cluster file parser failed: ${reply.crash}`));
    } else if ("error" in reply) {
      const { message, line, column } = reply.error;
      reject(new ClusterFileError(message, { file: this.#source, line, column }));
    } else {
      resolve(reply);
    }
  }

  /** Ends the worker; an answer still to come never comes. */
  terminate(): void {
    this.#worker.terminate();
  }
}

/** Runs the parse in workers, bounded by the time limit and the signal. */
async function parseInWorkers(
  bytes: Uint8Array,
  options: ParseClusterBytesOptions,
): Promise<ParsedClusterFile<string>> {
  const { source, timeoutMs, signal } = options;
  const workers: ParserWorker[] = [];
  const start = () => {
    const worker = new ParserWorker(source);
    workers.push(worker);
    return worker;
  };
  let stop: (reason: unknown) => void = () => {};
  const stopped = new Promise<never>((_resolve, reject) => stop = reject);
  const timer = setTimeout(() => {
    stop(
      new ClusterFileError(
        `cannot parse cluster file ${source}: not done after ${timeoutMs / 1000} s`,
        { file: source },
      ),
    );
  }, timeoutMs);
  const abort = () => stop(signal!.reason);
  signal?.addEventListener("abort", abort, { once: true });
  try {
    return await Promise.race([parseParts(bytes, start, options), stopped]);
  } finally {
    clearTimeout(timer);
    signal?.removeEventListener("abort", abort);
    for (const worker of workers) worker.terminate();
  }
}

/**
 * Parses the file in two parts when it is large and can be cut, else whole. The bytes go to the
 * first worker once it has loaded: transferred, not copied (a copy of a large file's bytes
 * stays in the process's resident memory after the parse); the second part's are a copy.
 */
async function parseParts(
  bytes: Uint8Array,
  start: () => ParserWorker,
  options: ParseClusterBytesOptions,
): Promise<ParsedClusterFile<string>> {
  const { source } = options;
  /** Takes in a whole-file parse that `worker` answers `reply` to. */
  const whole = async (worker: ParserWorker, reply: Promise<ParseReply>) => {
    const objects = new Map<string, ClusterObject<string>>();
    const end = await collect(worker, await reply, objects);
    options.parts?.(1);
    return { objects, skipped: end.skipped };
  };
  const cut = bytes.length > (options.splitAbove ?? SPLIT_ABOVE) ? cutPoint(bytes) : undefined;
  if (cut === undefined) {
    const worker = start();
    await worker.ready();
    return whole(worker, worker.ask({ bytes, source }, transferable(bytes)));
  }
  const a = start();
  const b = start();
  await Promise.all([a.ready(), b.ready()]);
  const tail = bytes.slice(cut);
  const [scanA, scanB] = (await Promise.all([
    a.ask({ bytes, source, part: { end: cut } }, transferable(bytes)),
    b.ask({ bytes: tail, source, part: { end: tail.length } }, [tail.buffer]),
  ])).map((reply) => {
    if (!("scanned" in reply)) throw unexpected(reply);
    return reply.scanned;
  });
  // The first worker holds the whole file's bytes: it parses them whole when the parts cannot be
  // joined.
  const wholeOnA = () => {
    b.terminate();
    return whole(a, a.ask({ whole: true }));
  };
  if (!scanA.cuttable || !scanB.cuttable) return wholeOnA();
  // Both parts draw on the whole file's budget; whether together they stayed within it is
  // checked once both are parsed.
  const aliasLimit = AliasBudget.forLength(scanA.length + scanB.length).limit;
  const parsedA = a.ask({ parse: { documentsBefore: 0, linesBefore: 0, aliasLimit } });
  const parsedB = b.ask({
    parse: { documentsBefore: scanA.documents, linesBefore: scanA.lines, aliasLimit },
  });
  // Awaited once the first part is in (its error, if any, comes first in the file).
  parsedB.catch(() => {});
  const objects = new Map<string, ClusterObject<string>>();
  const endA = await collect(a, await parsedA, objects);
  // The scan's count numbered the second part: were it wrong, the numbers would be too.
  if (endA.documents !== scanA.documents) return wholeOnA();
  const overridden: string[] = [];
  let endB: ParseEnd;
  try {
    endB = await collect(b, await parsedB, objects, {
      earlier: new Set(objects.keys()),
      overridden,
    });
  } catch (error) {
    // With aliases in the first part, the second had less budget than it was given: the
    // whole parse says where the file fails.
    if (error instanceof ClusterFileError && endA.aliasesUsed > 0) return wholeOnA();
    throw error;
  }
  if (endA.aliasesUsed > 0 && endA.aliasesUsed + endB.aliasesUsed > aliasLimit) {
    return wholeOnA();
  }
  let skipped = [...endA.skipped, ...endB.skipped];
  if (overridden.length > 0) {
    const origins = await a.ask({ origins: overridden });
    const firsts = await b.ask({ firsts: overridden });
    if (!("origins" in origins)) throw unexpected(origins);
    if (!("firsts" in firsts)) throw unexpected(firsts);
    const originOf = new Map(overridden.map((key, i) => [key, origins.origins[i]]));
    const lines = firsts.firsts.map(({ key, where, skippedBefore }) => ({
      at: skippedBefore,
      line: overriddenLine(originOf.get(key)!, where, key),
    }));
    skipped = [...endA.skipped, ...interleave(endB.skipped, lines)];
  }
  options.parts?.(2);
  return { objects, skipped };
}

/** What of `bytes` postMessage can transfer: its buffer, unless that is shared. */
function transferable(bytes: Uint8Array): Transferable[] {
  return bytes.buffer instanceof ArrayBuffer ? [bytes.buffer] : [];
}

/**
 * Takes a worker's batches into `objects` (starting with `reply`) until the last; a key again
 * moves to the end, as a later document with the key wins. A key of `earlier` (the part
 * before's) is noted in `overridden` the first time this part has it.
 */
async function collect(
  worker: ParserWorker,
  reply: ParseReply,
  objects: Map<string, ClusterObject<string>>,
  join?: { earlier: Set<string>; overridden: string[] },
): Promise<ParseEnd> {
  for (;;) {
    if (!("entries" in reply)) throw unexpected(reply);
    const { entries, last } = reply;
    for (let i = 0; i < entries.length; i += 3) {
      const key = entries[i];
      objects.delete(key);
      if (join?.earlier.delete(key)) join.overridden.push(key);
      objects.set(key, { kind: entries[i + 1] as ObjectKind, object: entries[i + 2] });
    }
    if (last !== undefined) return last;
    reply = await worker.next();
  }
}

/** `lines` inserted into `skipped`, each before the `at`-th line (`at` ascending). */
function interleave(skipped: string[], lines: { at: number; line: string }[]): string[] {
  const out: string[] = [];
  let j = 0;
  for (let i = 0; i <= skipped.length; i++) {
    while (j < lines.length && lines[j].at === i) out.push(lines[j++].line);
    if (i < skipped.length) out.push(skipped[i]);
  }
  return out;
}

const NEWLINE = 0x0a;
const DASH = 0x2d;
const SPACE = 0x20;
const TAB = 0x09;
const HASH = 0x23;

/**
 * Where a file may be cut in two: the start of the first line at or after its middle that is
 * `---`, blanks and perhaps a comment, ended by a newline (LF; CRLF files are never cut).
 * Undefined when there is none (a single document, such as a `v1 List`). The workers then check
 * that nothing in either part is misread when cut ({@link ClusterTextScan}).
 */
export function cutPoint(bytes: Uint8Array): number | undefined {
  for (
    let i = bytes.indexOf(NEWLINE, (bytes.length >> 1) - 1);
    i >= 0;
    i = bytes.indexOf(NEWLINE, i + 1)
  ) {
    const start = i + 1;
    if (bytes[start] !== DASH || bytes[start + 1] !== DASH || bytes[start + 2] !== DASH) continue;
    let j = start + 3;
    while (bytes[j] === SPACE || bytes[j] === TAB) j++;
    if (bytes[j] === HASH) {
      if (bytes.indexOf(NEWLINE, j) >= 0) return start;
    } else if (bytes[j] === NEWLINE) {
      return start;
    }
  }
  return undefined;
}
