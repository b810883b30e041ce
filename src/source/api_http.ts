/**
 * Reading the API server's HTTP answers: error statuses, bodies as text or as lines, retry
 * delays and waits that a stop cuts short. Used by the reflector; knows nothing of kinds.
 *
 * @module
 */

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

/** The body as text, calling `progress` on every chunk (so the idle watchdog sees progress). */
export async function readText(response: Response, progress: () => void): Promise<string> {
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of response.body!) {
    progress();
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

/** The body's newline-delimited lines, as they arrive. */
export async function* readLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let buffer = "";
  for await (const chunk of body.pipeThrough(new TextDecoderStream())) {
    buffer += chunk;
    let newline = buffer.indexOf("\n");
    while (newline >= 0) {
      yield buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      newline = buffer.indexOf("\n");
    }
  }
  if (buffer.trim() !== "") yield buffer;
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
