import assert from "node:assert/strict";
import { percentile, round, summarize } from "./stats.ts";

Deno.test("percentile() interpolates between the two nearest ranks", () => {
  assert.equal(percentile([4, 1, 3, 2], 50), 2.5);
  assert.equal(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 90), 9.1);
  assert.equal(percentile([7], 90), 7);
});

Deno.test("percentile() refuses an empty list and percentiles outside 0-100", () => {
  assert.throws(() => percentile([], 50), RangeError);
  assert.throws(() => percentile([1], 101), RangeError);
});

Deno.test("summarize() reports median, p90, min and max without reordering the input", () => {
  const samples = [30, 10, 20];
  assert.deepEqual(summarize(samples), { count: 3, median: 20, p90: 28, min: 10, max: 30 });
  assert.deepEqual(samples, [30, 10, 20]);
});

Deno.test("round() keeps the requested number of decimals", () => {
  assert.equal(round(1.23456), 1.23);
  assert.equal(round(1.23456, 3), 1.235);
});
