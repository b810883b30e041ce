/**
 * The client-side rate limit of API requests, as client-go's token bucket that upstream
 * kube-proxy's client uses (`clientConnection.qps`/`burst`, `--kube-api-qps`/`--kube-api-burst`,
 * default 5 and 10): every request — lists, watches, Events — takes a token; tokens come back at
 * `qps` per second up to `burst` held. A qps of 0 or below sends without limit (client-go's
 * "negative QPS: no rate limiter"; upstream's defaulting turns 0 into 5 before).
 *
 * @module
 */
import { type Clock, realClock } from "../runner/clock.ts";

/** Options of {@link TokenBucket}. */
export interface TokenBucketOptions {
  /** Tokens added per second; 0 or below: no limit. */
  qps: number;
  /** Most tokens held, and those held at the start (at least 1). */
  burst: number;
  /** The clock. Default {@link realClock}. */
  clock?: Clock;
}

/**
 * A token bucket: {@link take} resolves at once while tokens are left and otherwise when the
 * next one is due, in the order asked.
 *
 * @example
 * ```ts
 * const bucket = new TokenBucket({ qps: 5, burst: 10 });
 * await bucket.take(); // the first 10 at once, then one every 200 ms
 * ```
 */
export class TokenBucket {
  readonly #qps: number;
  readonly #burst: number;
  readonly #clock: Clock;
  #tokens: number;
  /** When the tokens were last counted. */
  #last: number;

  /** A full bucket. */
  constructor(options: TokenBucketOptions) {
    this.#qps = options.qps;
    this.#burst = Math.max(1, Math.floor(options.burst));
    this.#clock = options.clock ?? realClock;
    this.#tokens = this.#burst;
    this.#last = this.#clock.now();
  }

  /**
   * Takes a token, waiting for it if none is left; rejects with the signal's reason if `signal`
   * aborts first (the token then stays reserved, as client-go's limiter does).
   */
  take(signal?: AbortSignal): Promise<void> {
    if (this.#qps <= 0) return Promise.resolve();
    const now = this.#clock.now();
    this.#tokens = Math.min(this.#burst, this.#tokens + ((now - this.#last) * this.#qps) / 1000);
    this.#last = now;
    this.#tokens -= 1;
    if (this.#tokens >= 0) return Promise.resolve();
    const waitMs = Math.ceil((-this.#tokens * 1000) / this.#qps);
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const abort = () => {
        this.#clock.clearTimeout(timer);
        reject(signal?.reason);
      };
      const timer = this.#clock.setTimeout(() => {
        signal?.removeEventListener("abort", abort);
        resolve();
      }, waitMs);
      signal?.addEventListener("abort", abort, { once: true });
    });
  }
}

/**
 * `send` (a `fetch`) behind `bucket`: each request waits for a token first, honouring the
 * request's abort signal while it waits.
 *
 * @example
 * ```ts
 * const limited = rateLimitedFetch(fetch, new TokenBucket({ qps: 5, burst: 10 }));
 * ```
 */
export function rateLimitedFetch(send: typeof fetch, bucket: TokenBucket): typeof fetch {
  return async (input, init) => {
    await bucket.take(init?.signal ?? undefined);
    return await send(input, init);
  };
}
