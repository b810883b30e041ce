/**
 * Summary statistics of benchmark samples: median, percentiles, min and max.
 *
 * @module
 */

/** A summary of samples (same unit as the samples). */
export interface Summary {
  readonly count: number;
  readonly median: number;
  readonly p90: number;
  readonly min: number;
  readonly max: number;
}

/**
 * The `p`-th percentile (0-100) of `values`, interpolating linearly between the two nearest
 * ranks (so the 50th percentile of an even count is the mean of the middle two).
 * Throws a `RangeError` for an empty list or a `p` outside 0-100.
 *
 * @example
 * ```ts
 * percentile([1, 2, 3, 4], 50); // 2.5
 * ```
 */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) throw new RangeError("cannot take a percentile of no samples");
  if (!(p >= 0 && p <= 100)) throw new RangeError(`cannot take percentile ${p}: must be 0-100`);
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - low);
}

/** Median, 90th percentile, min and max of `values` (at least one). */
export function summarize(values: readonly number[]): Summary {
  return {
    count: values.length,
    median: percentile(values, 50),
    p90: percentile(values, 90),
    min: Math.min(...values),
    max: Math.max(...values),
  };
}

/** `value` rounded to `digits` decimals (default 2), for printing. */
export function round(value: number, digits = 2): number {
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}
