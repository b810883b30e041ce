/**
 * The worker that parses a cluster file off the main thread, so that no file — however large
 * or hostile — stops the proxy's event loop: health answers, syncs of other inputs and signals
 * go on while it works, and a parse that takes too long is ended by terminating the worker.
 *
 * It receives one {@link ParseRequest} (the file's bytes), parses them with
 * {@link parseClusterFile} keeping each object's {@link canonicalJson}, and answers with one
 * batch of objects per request for more, so that the main thread takes them in one event-loop
 * turn at a time; or with how the parse failed. Started by `cluster_file_parse.ts`, the only
 * code that talks to it.
 *
 * @module
 */
import { canonicalJson, ClusterFileError, parseClusterFile } from "./cluster_file.ts";
import type { ParseReply, ParseRequest } from "./cluster_file_parse.ts";

/** Objects per batch. */
const BATCH = 1000;

/** The worker's side of postMessage (the worker global scope's, not a window's). */
const scope = globalThis as unknown as {
  onmessage: ((event: MessageEvent<ParseRequest | "more">) => void) | null;
  postMessage(message: ParseReply): void;
};

/** What is left to send: the flattened objects and the skipped lines. */
let pending: { entries: string[]; skipped: string[] } | undefined;
let sent = 0;

scope.onmessage = ({ data }) => {
  if (data === "more") return sendBatch();
  try {
    const text = new TextDecoder().decode(data.bytes);
    const parsed = parseClusterFile(text, {
      source: data.source,
      keep: (_kind, object) => canonicalJson(object),
    });
    const entries: string[] = [];
    for (const [key, { kind, object }] of parsed.objects) entries.push(key, kind, object);
    pending = { entries, skipped: parsed.skipped };
    sendBatch();
  } catch (error) {
    if (error instanceof ClusterFileError) {
      const { message, line, column } = error;
      scope.postMessage({ error: { message, line, column } });
    } else {
      const stack = error instanceof Error ? error.stack ?? error.message : String(error);
      scope.postMessage({ crash: stack });
    }
  }
};

function sendBatch(): void {
  if (pending === undefined) return;
  const end = Math.min(sent + 3 * BATCH, pending.entries.length);
  const entries = pending.entries.slice(sent, end);
  sent = end;
  const done = sent === pending.entries.length;
  scope.postMessage(done ? { entries, skipped: pending.skipped } : { entries });
}
