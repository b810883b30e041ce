/**
 * Reading the API server's HTTP answers: error statuses, bodies as text or as lines, retry
 * delays and waits that a stop cuts short. Used by the reflector; knows nothing of kinds.
 *
 * @module
 */
import { concatBytes, formatBytes } from "../bounded_read.ts";
import { Slices } from "../slices.ts";

/** The API server answered with an error status (HTTP status or a watch `ERROR` event). */
export class ApiStatusError extends Error {
  /** Always `"ApiStatusError"`. */
  override name = "ApiStatusError";
  /** HTTP status code, e.g. 410. */
  readonly status: number;
  /** The Status `reason`, e.g. `Expired`, when the server gave one. */
  readonly reason?: string;

  /** Creates the error for `status`; `reason` is the Status object's. */
  constructor(message: string, options: { status: number; reason?: string }) {
    super(message);
    this.status = options.status;
    this.reason = options.reason;
  }
}

/** A watch or request was aborted because nothing arrived for the idle timeout. */
export class IdleTimeoutError extends Error {
  /** Always `"IdleTimeoutError"`. */
  override name = "IdleTimeoutError";
}

/**
 * Retry delays growing from `initialMs` by doubling up to `maxMs`; each delay is drawn from
 * [d/2, d) so that many clients do not retry in step. `reset()` starts over.
 */
export class Backoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #random: () => number;
  #nextMs: number;

  /** Creates the backoff; `random` (default `Math.random`) is for tests. */
  constructor(options: { initialMs: number; maxMs: number; random?: () => number }) {
    this.#initialMs = options.initialMs;
    this.#maxMs = Math.max(options.maxMs, options.initialMs);
    this.#random = options.random ?? Math.random;
    this.#nextMs = this.#initialMs;
  }

  /** The next delay in ms. */
  next(): number {
    const base = this.#nextMs;
    this.#nextMs = Math.min(base * 2, this.#maxMs);
    return Math.round(base / 2 + (base / 2) * this.#random());
  }

  /** After a success: the next delay is `initialMs` again. */
  reset(): void {
    this.#nextMs = this.#initialMs;
  }
}

/** The error a non-2xx response stands for, with the Status message when there is one. */
export async function statusError(response: Response): Promise<ApiStatusError> {
  let message = response.statusText || "request failed";
  let reason: string | undefined;
  try {
    const body: unknown = JSON.parse(await response.text());
    if (isRecord(body)) {
      if (typeof body.message === "string") message = body.message;
      if (typeof body.reason === "string") reason = body.reason;
    }
  } catch {
    // Not a Status object; the status line says enough.
  }
  return new ApiStatusError(`${response.status} ${reason ?? ""}: ${message}`.replace(/ :/, ":"), {
    status: response.status,
    reason,
  });
}

/** An answer (a LIST body, one watch event) was larger than the limit it was read with. */
export class ResponseTooLargeError extends Error {
  /** Always `"ResponseTooLargeError"`. */
  override name = "ResponseTooLargeError";
}

/**
 * Bytes that count as progress for the idle watchdog while a body is read: a server that
 * trickles less than this per idle timeout is treated as silent.
 */
export const PROGRESS_BYTES = 64 * 1024;

/**
 * The body as text, at most `maxBytes` of it (else {@link ResponseTooLargeError}, reading
 * stops there). `progress` is called on the first chunk and then once per
 * {@link PROGRESS_BYTES}, so the idle watchdog sees a body that really arrives, not one that
 * dribbles in a byte at a time.
 */
export async function readText(
  response: Response,
  progress: () => void,
  options: { maxBytes: number },
): Promise<string> {
  const chunks: string[] = [];
  const decoder = new TextDecoder();
  let bytes = 0;
  let counted = -PROGRESS_BYTES;
  for await (const chunk of response.body!) {
    bytes += chunk.length;
    if (bytes > options.maxBytes) throw tooLarge("an answer", options.maxBytes);
    if (bytes - counted >= PROGRESS_BYTES) {
      counted = bytes;
      progress();
    }
    chunks.push(decoder.decode(chunk, { stream: true }));
  }
  chunks.push(decoder.decode());
  return chunks.join("");
}

/**
 * The body's newline-delimited lines, as they arrive, in batches (the lines each read of the body
 * completed), each line at most `maxLineBytes` long (else {@link ResponseTooLargeError}: memory
 * stays bounded whatever the server sends). Blank lines are kept. Between batches the event loop
 * gets a turn every few tens of milliseconds, however fast they come. A batch, not a line at a
 * time: a watch-list of 100,000 objects would otherwise pay an async-generator step, a decoder
 * call and a pause check per object (~0.1–0.2 s at 50,000 services).
 */
export async function* readLineBatches(
  body: ReadableStream<Uint8Array>,
  options: { maxLineBytes: number },
): AsyncGenerator<string[]> {
  const { maxLineBytes } = options;
  const decoder = new TextDecoder();
  const slices = new Slices();
  /** The start of a line that has not ended yet. */
  let pending: Uint8Array[] = [];
  let pendingBytes = 0;
  /** The lines of `chunk` up to `end` (a newline's index) after what is pending, decoded. */
  const decode = (chunk: Uint8Array, end: number): string[] => {
    // A newline byte never occurs inside a multi-byte UTF-8 character: complete lines decode
    // alone, all at once.
    const complete = chunk.subarray(0, end);
    const bytes = pending.length === 0
      ? complete
      : concatBytes([...pending, complete], pendingBytes + complete.length);
    pending = [];
    pendingBytes = 0;
    return decoder.decode(bytes).split("\n");
  };
  for await (const chunk of body) {
    let start = 0;
    let last = -1;
    // Every line's length in bytes, before anything is decoded; the lines before one too long
    // are still handed on, as they would be one at a time.
    for (let newline = chunk.indexOf(10); newline >= 0; newline = chunk.indexOf(10, start)) {
      const length = newline - start + (last < 0 ? pendingBytes : 0);
      if (length > maxLineBytes) {
        if (last >= 0) yield decode(chunk, last);
        throw tooLarge("a line", maxLineBytes);
      }
      last = newline;
      start = newline + 1;
    }
    if (last >= 0) {
      yield decode(chunk, last);
      await slices.pause();
    }
    if (start < chunk.length) {
      pendingBytes += chunk.length - start;
      if (pendingBytes > maxLineBytes) throw tooLarge("a line", maxLineBytes);
      pending.push(chunk.slice(start));
    }
  }
  if (pendingBytes > 0) {
    const line = decoder.decode(concatBytes(pending, pendingBytes));
    if (line.trim() !== "") yield [line];
  }
}

function tooLarge(what: string, maxBytes: number): ResponseTooLargeError {
  return new ResponseTooLargeError(`the server sent ${what} larger than ${formatBytes(maxBytes)}`);
}

/** Waits `ms`, or less when `signal` aborts (the timer is cleared then). */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The error's message, with its cause's (fetch says only "fetch failed" without it). */
export function errorMessage(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause instanceof Error ? `: ${error.cause.message}` : "";
  return `${error.message}${cause}`;
}

/**
 * Sends a GET for `path` through `get` and hands the response to `consume`, aborting both when
 * nothing arrives for `idleTimeoutMs` (`consume` calls `kick` on every sign of progress) or when
 * `signal` aborts; an idle abort is thrown as {@link IdleTimeoutError}. The body is released
 * when `consume` stops early.
 */
export async function watchedRequest<T>(
  get: (path: string, signal: AbortSignal) => Promise<Response>,
  path: string,
  options: { readonly idleTimeoutMs: number; readonly signal: AbortSignal },
  consume: (response: Response, kick: () => void) => Promise<T>,
): Promise<T> {
  const { idleTimeoutMs, signal } = options;
  const controller = new AbortController();
  const stop = () => controller.abort(signal.reason);
  signal.addEventListener("abort", stop, { once: true });
  let idle = false;
  // A kick only notes the time (it comes once per watch event: 10,000s in a watch-list); the
  // one timer, when it fires, looks at how long it has really been quiet and waits the rest.
  let lastProgress = Date.now();
  const kick = () => {
    lastProgress = Date.now();
  };
  const check = () => {
    const quietMs = Date.now() - lastProgress;
    if (quietMs < idleTimeoutMs) return void (timer = setTimeout(check, idleTimeoutMs - quietMs));
    idle = true;
    controller.abort(new IdleTimeoutError(`nothing received for ${idleTimeoutMs} ms`));
  };
  let timer: ReturnType<typeof setTimeout> | undefined = setTimeout(check, idleTimeoutMs);
  try {
    const response = await get(path, controller.signal);
    kick();
    try {
      return await consume(response, kick);
    } finally {
      await response.body?.cancel().catch(() => {});
    }
  } catch (error) {
    if (idle) throw new IdleTimeoutError(`nothing received for ${idleTimeoutMs} ms`);
    throw error;
  } finally {
    clearTimeout(timer);
    signal.removeEventListener("abort", stop);
  }
}

/** One request the API client made, for {@link observeApiRequests}' observer. */
export interface ApiRequestObservation {
  /** `GET`, `POST`, … */
  readonly method: string;
  /** The server's `host:port`. */
  readonly host: string;
  /** The HTTP status, or `<error>` when no response came (client-go's label for that). */
  readonly code: string;
  /** From sending the request to its response headers (a watch's stream not included). */
  readonly seconds: number;
}

/** Why the API source gave up on a request or skipped an object, for {@link observeApiProblems}. */
export type ApiProblemReason =
  | "too_large"
  | "not_json"
  | "bad_event"
  | "wrong_kind"
  | "idle_timeout"
  | "expired"
  | "error_status"
  | "connection"
  | "other";

/** A problem of the API source with one resource (`services`, `endpointslices`, …). */
export interface ApiProblem {
  /** The kind, as the reflector names it (`Service`, `EndpointSlice`, `Node`, …). */
  readonly kind: string;
  readonly reason: ApiProblemReason;
}

/**
 * Where every API request and every API-source problem of this process is reported, as
 * client-go's process-wide `metrics.Register` (the metrics exist once per process whatever the
 * number of clients); the daemon points them at its metrics. Replaces earlier observers.
 */
const observers: {
  request?: (observation: ApiRequestObservation) => void;
  problem?: (problem: ApiProblem) => void;
} = {};

/** Sends every later request's method, host, status and latency to `observer`. */
export function observeApiRequests(
  observer: ((observation: ApiRequestObservation) => void) | undefined,
): void {
  observers.request = observer;
}

/** Sends every later API-source problem (see {@link reportApiProblem}) to `observer`. */
export function observeApiProblems(observer: ((problem: ApiProblem) => void) | undefined): void {
  observers.problem = observer;
}

/** Reports one problem of the API source to the observer, if any. */
export function reportApiProblem(kind: string, reason: ApiProblemReason): void {
  observers.problem?.({ kind, reason });
}

/** The {@link ApiProblemReason} of an error that ended a list or watch. */
export function problemReason(error: unknown): ApiProblemReason {
  if (error instanceof ResponseTooLargeError) return "too_large";
  if (error instanceof IdleTimeoutError) return "idle_timeout";
  if (error instanceof ApiStatusError) return error.status === 410 ? "expired" : "error_status";
  if (error instanceof SyntaxError || /not JSON/.test(errorMessage(error))) return "not_json";
  if (error instanceof Error && error.name === "BadWatchEventError") return "bad_event";
  if (error instanceof TypeError) return "connection";
  return "other";
}

/**
 * `send` (a `fetch`) measured: each request's method, host, status (or `<error>`) and time to
 * its response headers go to the observer of {@link observeApiRequests}, as client-go's
 * `rest_client_requests_total` and `rest_client_request_duration_seconds` count them.
 */
export function measuredFetch(send: typeof fetch): typeof fetch {
  return async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
    const started = performance.now();
    const url = input instanceof Request ? input.url : String(input);
    const method = (init?.method ?? (input instanceof Request ? input.method : "GET"))
      .toUpperCase();
    let host = "";
    try {
      host = new URL(url).host;
    } catch {
      // a URL fetch itself refuses: reported with an empty host
    }
    const observe = (code: string) =>
      observers.request?.({ method, host, code, seconds: (performance.now() - started) / 1000 });
    let response: Response;
    try {
      response = await send(input, init);
    } catch (error) {
      observe("<error>");
      throw error;
    }
    observe(String(response.status));
    return response;
  };
}
