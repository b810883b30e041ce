/**
 * The worker that parses a cluster file, or one part of it, off the main thread, so that no
 * file — however large or hostile — stops the proxy's event loop: health answers, syncs of other
 * inputs and signals go on while it works, and a parse that takes too long is ended by
 * terminating the worker.
 *
 * Once loaded it says so; then it receives one {@link ParseRequest} with bytes: a whole file,
 * which it parses at once; or a file whose first part (up to a `---` line) it scans
 * ({@link scanClusterText}) and parses once told where the part sits in the whole, or parses
 * whole when told to after all. While it parses ({@link parseClusterPart}) it
 * sends the accepted objects' {@link canonicalJson} in batches, as they come, so that the main
 * thread takes them in one event-loop turn at a time and the worker never holds them all; then
 * how the parse ended, or how it failed. Afterwards it answers questions about the keys it
 * kept, for joining the parts. Started by `cluster_file_parse.ts`, the only code that talks to
 * it.
 *
 * @module
 */
import { AliasBudget } from "../bounded_yaml.ts";
import {
  canonicalJson,
  ClusterFileError,
  type ClusterFilePart,
  parseClusterPart,
  type ParsedClusterPart,
  scanClusterText,
} from "./cluster_file.ts";
import type { ParseReply, ParseRequest } from "./cluster_file_parse.ts";
import type { ObjectKind, RawObject } from "./events.ts";
import { objectKey } from "./object_key.ts";

/** Objects per batch. */
const BATCH = 1000;

/** The worker's side of postMessage (the worker global scope's, not a window's). */
const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent<ParseRequest>) => void) | null;
  postMessage(message: ParseReply): void;
};

/** The text and name of the file or part, until it is parsed. */
let input: { text: string; source: string } | undefined;
/** The whole file's bytes and name, while a part of it may have to be parsed whole after all. */
let file: { bytes: Uint8Array; source: string } | undefined;
/** The parsed part: where its keys came from, for joining it with the part before. */
let parsed: ParsedClusterPart<null> | undefined;

scope.onmessage = ({ data }) => {
  if ("origins" in data) {
    const origins = parsed!.origins;
    return scope.postMessage({ origins: data.origins.map((key) => origins.get(key)!) });
  }
  if ("firsts" in data) {
    const wanted = new Set(data.firsts);
    const firsts = [...parsed!.firsts].filter(([key]) => wanted.has(key));
    return scope.postMessage({ firsts: firsts.map(([key, first]) => ({ key, ...first })) });
  }
  if ("parse" in data) {
    const { documentsBefore, linesBefore, aliasLimit } = data.parse;
    return parse({ documentsBefore, linesBefore, aliases: new AliasBudget(aliasLimit) });
  }
  if ("whole" in data) return parseWhole(file!.bytes, file!.source);
  if (data.part === undefined) return parseWhole(data.bytes, data.source);
  try {
    const text = new TextDecoder().decode(data.bytes.subarray(0, data.part.end));
    input = { text, source: data.source };
    // The first part's worker has the whole file: kept for a whole parse after all.
    if (data.part.end < data.bytes.length) file = { bytes: data.bytes, source: data.source };
    scope.postMessage({ scanned: { ...scanClusterText(text), length: text.length } });
  } catch (error) {
    fail(error);
  }
};
scope.postMessage({ ready: true });

/** Parses `bytes` as a whole file. */
function parseWhole(bytes: Uint8Array, source: string): void {
  file = undefined;
  try {
    const text = new TextDecoder().decode(bytes);
    input = { text, source };
    parse({ documentsBefore: 0, linesBefore: 0, aliases: AliasBudget.forLength(text.length) });
  } catch (error) {
    fail(error);
  }
}

function parse(part: ClusterFilePart): void {
  try {
    const { text, source } = input!;
    input = undefined;
    let entries: string[] = [];
    // Each accepted object goes out with the next batch: the worker keeps only its origin.
    const keep = (kind: ObjectKind, object: RawObject) => {
      entries.push(objectKey(kind, object)!, kind, canonicalJson(object));
      if (entries.length >= 3 * BATCH) {
        scope.postMessage({ entries });
        entries = [];
      }
      return null;
    };
    parsed = parseClusterPart(text, { source, keep, part });
    const { skipped, documents } = parsed;
    const aliasesUsed = part.aliases.limit - part.aliases.remaining;
    scope.postMessage({ entries, last: { skipped, documents, aliasesUsed } });
  } catch (error) {
    fail(error);
  }
}

function fail(error: unknown): void {
  if (error instanceof ClusterFileError) {
    const { message, line, column } = error;
    scope.postMessage({ error: { message, line, column } });
  } else {
    const stack = error instanceof Error ? error.stack ?? error.message : String(error);
    scope.postMessage({ crash: stack });
  }
}
