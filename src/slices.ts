/**
 * Long loops in short slices: work that handles many items at once (a file's 50,000 objects, a
 * relist, a burst of watch events) gives the event loop a turn every few tens of milliseconds,
 * so that health answers, timers, other inputs and signals are never held up for long.
 *
 * @module
 */

/** How long one slice of work may keep the event loop, ms. */
export const DEFAULT_SLICE_MS = 50;

/** When the event loop last ran its timers (and, in that turn, I/O), as the heartbeat saw it. */
let turnAt = performance.now();
/** Whether a heartbeat is pending. */
let heartbeat = false;

/**
 * Notes the event loop's next turn in {@link turnAt}: a zero-delay timer, run whenever the loop
 * next runs timers — while the work awaits I/O, or while another loop of work yields. Unref'd:
 * it never keeps the process alive.
 */
function armHeartbeat(): void {
  if (heartbeat) return;
  heartbeat = true;
  Deno.unrefTimer(setTimeout(() => {
    heartbeat = false;
    turnAt = performance.now();
  }, 0));
}

/**
 * A clock for slices of work: {@link pause} resolves at once while the current slice lasts and
 * after one macrotask (timers, I/O and signal handlers run) once it is used up. A turn the event
 * loop took anyway (the work awaited I/O, or another loop yielded) starts a new slice: in Deno a
 * zero-delay timer waits 1-2 ms, ~4 % of a 50 ms slice spent idle, so a loop yields only where
 * nothing else gave the event loop a turn.
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

  /** Gives the event loop a turn if the slice is used up and it had none meanwhile. */
  async pause(): Promise<void> {
    if (turnAt > this.#start) this.#start = turnAt;
    if (performance.now() - this.#start < this.#sliceMs) {
      armHeartbeat();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 0));
    this.#start = performance.now();
  }
}
