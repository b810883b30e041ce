/**
 * The bounded-frequency runner: decides when the sync function runs — rate-limited, coalesced,
 * periodic and retried — modelled on upstream kube-proxy's `BoundedFrequencyRunner`.
 *
 * @module
 */

import { type Clock, realClock } from "./clock.ts";

/** Options of {@link BoundedFrequencyRunner}. Times are in milliseconds. */
export interface BoundedFrequencyRunnerOptions {
  /** Least time between two run starts (upstream `minSyncPeriod`). 0 means no limit. */
  minIntervalMs: number;
  /**
   * Longest time from the end of one run to the start of the next (upstream `syncPeriod`);
   * `Infinity` turns periodic runs off. Must be at least `minIntervalMs`.
   */
  maxIntervalMs: number;
  /** Delay from a failed run's end to its retry. Default `maxIntervalMs`. */
  retryIntervalMs?: number;
  /**
   * How many runs may start back to back before `minIntervalMs` spacing applies: the limiter is a
   * token bucket holding `burst` tokens and refilled one token per `minIntervalMs`, as upstream's.
   * Default 1, so run starts are always at least `minIntervalMs` apart.
   */
  burst?: number;
  /** Source of time and timers. Default {@link realClock}. */
  clock?: Clock;
  /**
   * Told about every error `fn` throws or rejects with; the run is then retried. Default: logs
   * with `console.error`.
   */
  onError?: (err: unknown) => void;
}

/**
 * Runs an async function (the sync loop) no more often than a minimum interval, at least as often
 * as a maximum interval, never concurrently with itself, and again after it fails.
 *
 * Requests ({@link run}) that arrive while a run is waiting or in progress collapse into at most
 * one following run, so a burst of changes costs at most two runs. One timer is armed at a time,
 * on the injected clock. Requests made before {@link start} are remembered and served by it.
 *
 * @example
 * ```ts
 * const runner = new BoundedFrequencyRunner(() => syncRules(), {
 *   minIntervalMs: 1000,
 *   maxIntervalMs: 30_000,
 *   onError: (err) => console.error("sync failed", err),
 * });
 * runner.start(); // first sync now, then at least every 30 s
 * runner.run(); // something changed: sync again, but not within 1 s of the last start
 * await runner.stop();
 * ```
 */
export class BoundedFrequencyRunner {
  readonly #fn: () => Promise<void>;
  readonly #clock: Clock;
  readonly #minIntervalMs: number;
  readonly #maxIntervalMs: number;
  readonly #retryIntervalMs: number;
  readonly #burst: number;
  readonly #onError: (err: unknown) => void;

  #started = false;
  #stopped = false;
  /** A run was asked for by {@link run} or {@link start} and has not started yet. */
  #requested = false;
  /** When a retry is due (failure or {@link retryAfter}); cleared when a run starts. */
  #retryAt: number | undefined;
  /** When the periodic run is due: `maxIntervalMs` after the last run ended. */
  #periodicAt = Infinity;
  /** Rate limiter state (GCRA form of a token bucket): the "theoretical" next start time. */
  #limiterAt = -Infinity;
  #running = false;
  #inFlight: Promise<void> = Promise.resolve();
  #timer: number | undefined;
  #timerAt = Infinity;

  #lastRunStartedAt: number | undefined;
  #lastSuccessAt: number | undefined;
  #runs = 0;
  #failures = 0;

  /**
   * Creates a stopped runner for `fn`; nothing runs until {@link start}. Throws a `RangeError` for
   * intervals that are negative, NaN, or with `maxIntervalMs < minIntervalMs`, and for a burst
   * that is not a positive integer.
   */
  constructor(fn: () => Promise<void>, options: BoundedFrequencyRunnerOptions) {
    const { minIntervalMs, maxIntervalMs } = options;
    const retryIntervalMs = options.retryIntervalMs ?? maxIntervalMs;
    const burst = options.burst ?? 1;
    const finite = Number.isFinite(minIntervalMs) && minIntervalMs >= 0;
    checkOption("minIntervalMs", minIntervalMs, { ok: finite, rule: "a finite number >= 0" });
    checkOption("maxIntervalMs", maxIntervalMs, {
      ok: maxIntervalMs >= minIntervalMs,
      rule: `>= minIntervalMs (${minIntervalMs})`,
    });
    checkOption("retryIntervalMs", retryIntervalMs, { ok: retryIntervalMs >= 0, rule: ">= 0" });
    checkOption("burst", burst, {
      ok: Number.isInteger(burst) && burst >= 1,
      rule: "an integer >= 1",
    });
    this.#fn = fn;
    this.#clock = options.clock ?? realClock;
    this.#minIntervalMs = minIntervalMs;
    this.#maxIntervalMs = maxIntervalMs;
    this.#retryIntervalMs = retryIntervalMs;
    this.#burst = burst;
    this.#onError = options.onError ?? logError;
  }

  /** When the last run started (clock milliseconds), or `undefined` before the first run. */
  get lastRunStartedAt(): number | undefined {
    return this.#lastRunStartedAt;
  }

  /** When the last successful run ended (clock milliseconds), or `undefined` if none has. */
  get lastSuccessAt(): number | undefined {
    return this.#lastSuccessAt;
  }

  /** How many runs have started. */
  get runs(): number {
    return this.#runs;
  }

  /** How many runs have failed (thrown or rejected). */
  get failures(): number {
    return this.#failures;
  }

  /**
   * Whether a run is owed and has not started: requested, or a retry or periodic run that is
   * due and held back by the rate limit, by a run in progress, or because start() was not called.
   */
  get pending(): boolean {
    return !this.#stopped && this.#dueAt() <= this.#clock.now();
  }

  /** Whether `fn` is executing right now. */
  get running(): boolean {
    return this.#running;
  }

  /**
   * Starts the runner: runs `fn` as soon as the rate limit allows (right away the first time) and
   * then at least every `maxIntervalMs`. Calling it again, or after {@link stop}, does nothing.
   */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#requested = true;
    this.#schedule();
  }

  /**
   * Asks for a run. It starts once `minIntervalMs` has passed since the last start (or at once),
   * and never while another run is in progress; any number of requests before it starts make one
   * run. Does nothing after {@link stop}.
   */
  run(): void {
    if (this.#stopped) return;
    this.#requested = true;
    this.#schedule();
  }

  /**
   * Asks for a run `ms` from now unless one is due sooner; `fn` may call this to have itself
   * retried. The rate limit still applies, and any run that starts first takes its place.
   */
  retryAfter(ms: number): void {
    checkOption("retryAfter(ms)", ms, { ok: ms >= 0, rule: ">= 0" });
    if (this.#stopped) return;
    this.#retryAt = Math.min(this.#retryAt ?? Infinity, this.#clock.now() + ms);
    this.#schedule();
  }

  /**
   * Stops the runner: cancels its timer, drops outstanding requests, and resolves once a run in
   * progress (if any) has finished. No run starts afterwards.
   */
  stop(): Promise<void> {
    this.#stopped = true;
    this.#requested = false;
    this.#retryAt = undefined;
    this.#disarm();
    return this.#inFlight;
  }

  /** The earliest time a run is owed, ignoring the rate limit. */
  #dueAt(): number {
    if (this.#requested) return -Infinity;
    return Math.min(this.#retryAt ?? Infinity, this.#periodicAt);
  }

  /** The earliest time the rate limiter lets a run start. */
  #limiterAllowsAt(): number {
    return this.#limiterAt - (this.#burst - 1) * this.#minIntervalMs;
  }

  /** Arms the one timer for the next run that is owed, or disarms it when none can start. */
  #schedule(): void {
    if (!this.#started || this.#stopped || this.#running) {
      this.#disarm();
      return;
    }
    const dueAt = this.#dueAt();
    if (dueAt === Infinity) {
      this.#disarm();
      return;
    }
    const at = Math.max(dueAt, this.#limiterAllowsAt(), this.#clock.now());
    if (this.#timer !== undefined && this.#timerAt === at) return;
    this.#disarm();
    this.#timerAt = at;
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = Infinity;
      this.#tick();
    }, at - this.#clock.now());
  }

  #disarm(): void {
    if (this.#timer === undefined) return;
    this.#clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
  }

  /** Timer callback: starts the owed run if it may start now, else re-arms (early timers). */
  #tick(): void {
    if (!this.#started || this.#stopped || this.#running) return;
    const now = this.#clock.now();
    if (this.#dueAt() > now || this.#limiterAllowsAt() > now) {
      this.#schedule();
      return;
    }
    this.#requested = false;
    this.#retryAt = undefined;
    this.#limiterAt = Math.max(this.#limiterAt, now) + this.#minIntervalMs;
    this.#lastRunStartedAt = now;
    this.#runs++;
    this.#running = true;
    this.#inFlight = this.#execute();
  }

  async #execute(): Promise<void> {
    try {
      await this.#fn();
      this.#lastSuccessAt = this.#clock.now();
    } catch (err) {
      this.#failures++;
      const retryAt = this.#clock.now() + this.#retryIntervalMs;
      this.#retryAt = Math.min(this.#retryAt ?? Infinity, retryAt);
      this.#report(err);
    } finally {
      this.#running = false;
      this.#periodicAt = this.#clock.now() + this.#maxIntervalMs;
      this.#schedule();
    }
  }

  #report(err: unknown): void {
    try {
      this.#onError(err);
    } catch (onErrorFailure) {
      logError(new Error("BoundedFrequencyRunner onError threw", { cause: onErrorFailure }));
    }
  }
}

/** Throws a `RangeError` naming the option and its rule unless `check.ok` (NaN never passes). */
function checkOption(name: string, value: number, check: { ok: boolean; rule: string }): void {
  if (!check.ok || Number.isNaN(value)) {
    throw new RangeError(
      `cannot use BoundedFrequencyRunner: ${name} is ${value}, must be ${check.rule}`,
    );
  }
}

/** The default `onError`: one log line with the error. */
function logError(err: unknown): void {
  console.error("BoundedFrequencyRunner: run failed:", err);
}
