/**
 * The one injected clock: every timer in the proxy goes through a {@link Clock}, so tests can use
 * {@link FakeClock} and advance time by hand instead of sleeping.
 *
 * @module
 */

/**
 * A source of time and one-shot timers, in milliseconds. Production code takes a `Clock` (default
 * {@link realClock}); tests pass a {@link FakeClock}.
 */
export interface Clock {
  /** Current time in milliseconds (Unix epoch for {@link realClock}; any origin is allowed). */
  now(): number;
  /** Calls `fn` once after at least `ms` milliseconds; returns an id for {@link clearTimeout}. */
  setTimeout(fn: () => void, ms: number): number;
  /** Cancels a timer from {@link setTimeout}; unknown or already fired ids are ignored. */
  clearTimeout(id: number): void;
}

/** Runtime timer handles by the numeric id {@link realClock} hands out (Deno returns objects). */
const realTimers = new Map<number, ReturnType<typeof globalThis.setTimeout>>();
let nextRealTimerId = 1;

/**
 * The wall clock: `Date.now()` and the runtime's own timers. Timers are ordinary (they keep the
 * process alive until they fire or are cleared), so owners must clear them when they stop.
 */
export const realClock: Clock = {
  now(): number {
    return Date.now();
  },
  setTimeout(fn: () => void, ms: number): number {
    const id = nextRealTimerId++;
    const handle = globalThis.setTimeout(() => {
      realTimers.delete(id);
      fn();
    }, ms);
    realTimers.set(id, handle);
    return id;
  },
  clearTimeout(id: number): void {
    const handle = realTimers.get(id);
    if (handle === undefined) return;
    realTimers.delete(id);
    globalThis.clearTimeout(handle);
  },
};

/** Options of {@link FakeClock}. */
export interface FakeClockOptions {
  /** The time the clock starts at, in milliseconds. Default 0. */
  now?: number;
  /**
   * Most timers one `advance` may fire before it gives up with an error; this catches a timer that
   * keeps rescheduling itself with no delay. Default 100000.
   */
  maxFiringsPerAdvance?: number;
}

/** Microtask turns {@link FakeClock.flush} waits; enough for a few chained `await`s to settle. */
const FLUSH_TURNS = 50;

interface FakeTimer {
  at: number;
  seq: number;
  fn: () => void;
}

/**
 * A {@link Clock} that only moves when told to. Timers fire in time order (ties in the order they
 * were set) during {@link FakeClock.advance} or {@link FakeClock.advanceAsync}, including timers
 * that fired timers set inside the advanced window. Nothing here sleeps or uses real timers.
 *
 * @example
 * ```ts
 * const clock = new FakeClock();
 * let fired = 0;
 * clock.setTimeout(() => fired++, 1000);
 * clock.advance(999); // fired === 0
 * clock.advance(1); // fired === 1, clock.now() === 1000
 * ```
 */
export class FakeClock implements Clock {
  #now: number;
  readonly #maxFirings: number;
  readonly #timers = new Map<number, FakeTimer>();
  #nextId = 1;
  #nextSeq = 0;

  /** Creates a clock at `options.now` (default 0) with no timers. */
  constructor(options: FakeClockOptions = {}) {
    this.#now = options.now ?? 0;
    this.#maxFirings = options.maxFiringsPerAdvance ?? 100_000;
  }

  /** The fake current time in milliseconds. */
  now(): number {
    return this.#now;
  }

  /** Schedules `fn` at `now() + ms`; a negative or NaN delay counts as 0, like real timers. */
  setTimeout(fn: () => void, ms: number): number {
    const delay = Number.isNaN(ms) || ms < 0 ? 0 : ms;
    const id = this.#nextId++;
    this.#timers.set(id, { at: this.#now + delay, seq: this.#nextSeq++, fn });
    return id;
  }

  /** Cancels the timer `id`; unknown or already fired ids are ignored. */
  clearTimeout(id: number): void {
    this.#timers.delete(id);
  }

  /** How many timers are set and have neither fired nor been cleared. */
  pendingTimers(): number {
    return this.#timers.size;
  }

  /**
   * Moves time forward by `ms`, firing every timer due by then in time order; `now()` reads each
   * timer's own due time while it runs and `now() + ms` at the end. A callback that throws stops
   * the advance there and the error propagates. Async work started by callbacks does not get to
   * run in between; use {@link advanceAsync} for that.
   */
  advance(ms: number): void {
    const target = this.#target(ms);
    let firings = 0;
    for (let timer = this.#takeDue(target); timer; timer = this.#takeDue(target)) {
      this.#countFiring(++firings);
      this.#now = timer.at;
      timer.fn();
    }
    this.#now = target;
  }

  /**
   * Like {@link advance}, but lets pending promise callbacks settle (see {@link flush}) before
   * each timer fires and once at the end, so async work started by one timer can set the next.
   */
  async advanceAsync(ms: number): Promise<void> {
    const target = this.#target(ms);
    let firings = 0;
    await this.flush();
    for (let timer = this.#takeDue(target); timer; timer = this.#takeDue(target)) {
      this.#countFiring(++firings);
      this.#now = timer.at;
      timer.fn();
      await this.flush();
    }
    this.#now = target;
    await this.flush();
  }

  /**
   * Lets already-resolved promise chains run by yielding a fixed number of microtask turns. It
   * never waits on real time, so a promise that waits on something else stays pending.
   */
  async flush(): Promise<void> {
    for (let i = 0; i < FLUSH_TURNS; i++) await Promise.resolve();
  }

  #target(ms: number): number {
    if (!(ms >= 0)) {
      throw new RangeError(`cannot advance FakeClock by ${ms} ms, must be 0 or more`);
    }
    return this.#now + ms;
  }

  #countFiring(firings: number): void {
    if (firings > this.#maxFirings) {
      throw new Error(
        `FakeClock fired more than ${this.#maxFirings} timers in one advance; ` +
          "a timer probably reschedules itself with no delay",
      );
    }
  }

  /** Removes and returns the earliest timer due at or before `target`, if any. */
  #takeDue(target: number): FakeTimer | undefined {
    let nextId: number | undefined;
    let next: FakeTimer | undefined;
    for (const [id, timer] of this.#timers) {
      if (timer.at > target) continue;
      if (!next || timer.at < next.at || (timer.at === next.at && timer.seq < next.seq)) {
        nextId = id;
        next = timer;
      }
    }
    if (nextId !== undefined) this.#timers.delete(nextId);
    return next;
  }
}
