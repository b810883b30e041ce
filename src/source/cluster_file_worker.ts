/**
 * The worker that parses a cluster file, or one part of it, off the main thread, so that no
 * file — however large or hostile — stops the proxy's event loop: health answers, syncs of other
 * inputs and signals go on while it works, and a parse that takes too long is ended by
 * terminating the worker.
 *
 * It receives one {@link ParseRequest} with bytes: a whole file, which it parses with
 * {@link parseClusterPart} keeping each object's {@link canonicalJson}; or one part of a file
 * cut at a `---` line, which it first scans ({@link scanClusterText}) and parses once told
 * where the part sits in the whole. It answers with one batch of objects per request for more,
 * so that the main thread takes them in one event-loop turn at a time, or with how the parse
 * failed; afterwards it answers questions about the keys it kept, for joining the parts.
 * Started by `cluster_file_parse.ts`, the only code that talks to it.
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

/** Objects per batch. */
const BATCH = 1000;

/** The worker's side of postMessage (the worker global scope's, not a window's). */
const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent<ParseRequest>) => void) | null;
  postMessage(message: ParseReply): void;
};

/** The text and name of the file or part, until it is parsed. */
let input: { text: string; source: string } | undefined;
/** The parsed part, and what is left to send: the flattened objects. */
let parsed: { part: ParsedClusterPart<string>; entries: string[]; aliasesUsed: number } | undefined;
let sent = 0;

scope.onmessage = ({ data }) => {
  if (data === "more") return sendBatch();
  if ("origins" in data) {
    const origins = parsed!.part.origins;
    return scope.postMessage({ origins: data.origins.map((key) => origins.get(key)!) });
  }
  if ("firsts" in data) {
    const wanted = new Set(data.firsts);
    const firsts = [...parsed!.part.firsts].filter(([key]) => wanted.has(key));
    return scope.postMessage({ firsts: firsts.map(([key, first]) => ({ key, ...first })) });
  }
  if ("parse" in data) {
    const { documentsBefore, linesBefore, aliasLimit } = data.parse;
    return parse({ documentsBefore, linesBefore, aliases: new AliasBudget(aliasLimit) });
  }
  try {
    const text = new TextDecoder().decode(data.bytes);
    input = { text, source: data.source };
    if (data.part) {
      scope.postMessage({ scanned: { ...scanClusterText(text), length: text.length } });
    } else {
      parse({ documentsBefore: 0, linesBefore: 0, aliases: AliasBudget.forLength(text.length) });
    }
  } catch (error) {
    fail(error);
  }
};

function parse(part: ClusterFilePart): void {
  try {
    const { text, source } = input!;
    input = undefined;
    const result = parseClusterPart(text, {
      source,
      keep: (_kind, object) => canonicalJson(object),
      part,
    });
    const entries: string[] = [];
    for (const [key, { kind, object }] of result.objects) entries.push(key, kind, object);
    result.objects.clear();
    const aliasesUsed = part.aliases.limit - part.aliases.remaining;
    parsed = { part: result, entries, aliasesUsed };
    sendBatch();
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

function sendBatch(): void {
  if (parsed === undefined) return;
  const { entries, part, aliasesUsed } = parsed;
  const end = Math.min(sent + 3 * BATCH, entries.length);
  const batch = entries.slice(sent, end);
  sent = end;
  if (sent < entries.length) return scope.postMessage({ entries: batch });
  parsed.entries = [];
  const { skipped, documents } = part;
  scope.postMessage({ entries: batch, last: { skipped, documents, aliasesUsed } });
}
