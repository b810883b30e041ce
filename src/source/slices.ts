/**
 * Long loops in short slices: work that handles many items at once (a file's 50,000 objects, a
 * relist, a burst of watch events) gives the event loop a turn every few tens of milliseconds,
 * so that health answers, timers, other inputs and signals are never held up for long.
 *
 * @module
 */

/** How long one slice of work may keep the event loop, ms. */
export const DEFAULT_SLICE_MS = 50;

/**
 * A clock for slices of work: {@link pause} resolves at once while the current slice lasts and
 * after one macrotask (timers, I/O and signal handlers run) once it is used up.
 *
 * @example
 * ```ts
 * const slices = new Slices();
 * for (const event of events) {
 *   handler.onEvent(event);
 *   await slices.pause();
 * }
 * ```
 */
export class Slices {
  readonly #sliceMs: number;
  #start = performance.now();

  /** Slices of `sliceMs` (default {@link DEFAULT_SLICE_MS}). */
  constructor(sliceMs = DEFAULT_SLICE_MS) {
    this.#sliceMs = sliceMs;
  }

  /** Gives the event loop a turn if the slice is used up. */
  async pause(): Promise<void> {
    if (performance.now() - this.#start < this.#sliceMs) return;
    await new Promise((resolve) => setTimeout(resolve, 0));
    this.#start = performance.now();
  }
}
